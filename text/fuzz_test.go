package text

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzReadTokenizer reads arbitrary bytes as tokenizer.json and as
// vocab.json plus merges.txt: a bad file is an ErrFormat error, never a
// panic, and a tokenizer that loads encodes losslessly.
func FuzzReadTokenizer(f *testing.F) {
	vocab, err := os.ReadFile("testdata/gpt2/vocab.json")
	if err != nil {
		f.Fatal(err)
	}
	merges, err := os.ReadFile("testdata/gpt2/merges.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(vocab, merges[:200])
	f.Add([]byte(`{"model":{"type":"BPE","vocab":`+string(vocab)+`,"merges":[["Ġ","t"]]},"pre_tokenizer":{"type":"ByteLevel"}}`), []byte("Ġ t\n"))
	f.Add([]byte(`{"a":0}`), []byte("#version: 0.2\na b\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		for _, read := range []func() (*BPE, error){
			func() (*BPE, error) { return ReadBPE(bytes.NewReader(a), bytes.NewReader(b), BPEOptions{}) },
			func() (*BPE, error) { return ReadTokenizerJSON(bytes.NewReader(a)) },
		} {
			tok, err := read()
			if err != nil {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("error not ErrFormat: %v", err)
				}
				continue
			}
			s := string(b)
			got, err := tok.Decode(tok.Encode(s))
			if err != nil || got != s {
				t.Fatalf("Decode(Encode(%q)) = %q, %v", s, got, err)
			}
		}
	})
}

// FuzzEncode checks that GPT-2's tokenizer (the fixture) round-trips any
// string and that the pre-tokenizer's pieces concatenate to it.
func FuzzEncode(f *testing.F) {
	tok := loadFixture(f)
	f.Add("Hello, world! It's  2019.\n\n")
	f.Add("\xff\xfe日本語 😀")
	f.Fuzz(func(t *testing.T, s string) {
		var joined []byte
		for _, p := range Pretokenize(s) {
			if p == "" {
				t.Fatalf("empty piece in %q", s)
			}
			joined = append(joined, p...)
		}
		if string(joined) != s {
			t.Fatalf("pieces of %q join to %q", s, joined)
		}
		got, err := tok.Decode(tok.Encode(s))
		if err != nil || got != s {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", s, got, err)
		}
	})
}
