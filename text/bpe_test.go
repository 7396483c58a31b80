package text

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

type gpt2Case struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func readJSON[T any](t *testing.T, path string) T {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// checkGPT2 encodes the recorded strings with tok and compares the ids
// with the real GPT-2 tokenizer's (testdata/gpt2ref.js).
func checkGPT2(t *testing.T, tok *BPE) {
	t.Helper()
	for _, c := range readJSON[[]gpt2Case](t, "testdata/gpt2/expected.json") {
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("Encode(%q) = %v, GPT-2 gives %v", c.Text, got, c.IDs)
		}
		s, err := tok.Decode(got)
		if err != nil || s != c.Text {
			t.Errorf("Decode(Encode(%q)) = %q, %v", c.Text, s, err)
		}
	}
}

func loadFixture(t testing.TB) *BPE {
	t.Helper()
	tok, err := LoadBPE("testdata/gpt2")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestGPT2Ids checks the ids of fixed strings against the real GPT-2
// tokenizer's, recorded with the part of its vocabulary and merges those
// strings use (testdata/gpt2ref.js says how). "Hello world" is 15496, 995.
func TestGPT2Ids(t *testing.T) {
	tok := loadFixture(t)
	checkGPT2(t, tok)
	if id, ok := tok.EOS(); !ok || id != 50256 {
		t.Errorf("EOS = %d, %v; GPT-2's <|endoftext|> is 50256", id, ok)
	}
	if tok.VocabSize() != 50257 {
		t.Errorf("VocabSize = %d, want 50257", tok.VocabSize())
	}
}

// TestGPT2IdsFullVocabulary runs the same check with the full GPT-2 files
// when DPMF_GPT2_DIR names a directory holding them (vocab.json and
// merges.txt, or tokenizer.json).
func TestGPT2IdsFullVocabulary(t *testing.T) {
	dir := os.Getenv("DPMF_GPT2_DIR")
	if dir == "" {
		t.Skip("DPMF_GPT2_DIR not set: GPT-2's full vocabulary (about 1.5 MB) is not kept in the repository")
	}
	tok, err := LoadBPE(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkGPT2(t, tok)
}

// TestTokenizerJSON reads the fixture written as a tokenizer.json, with
// merges in both of the forms Hugging Face writes, and checks the same ids.
func TestTokenizerJSON(t *testing.T) {
	vocab := readJSON[map[string]int](t, "testdata/gpt2/vocab.json")
	mb, err := os.ReadFile("testdata/gpt2/merges.txt")
	if err != nil {
		t.Fatal(err)
	}
	var asStrings []string
	var asPairs [][2]string
	for _, l := range strings.Split(strings.TrimSpace(string(mb)), "\n")[1:] {
		asStrings = append(asStrings, l)
		a, b, _ := strings.Cut(l, " ")
		asPairs = append(asPairs, [2]string{a, b})
	}
	delete(vocab, "<|endoftext|>")
	for _, merges := range []any{asStrings, asPairs} {
		tj := map[string]any{
			"normalizer":    nil,
			"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
			"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "dropout": nil},
			"added_tokens":  []map[string]any{{"id": 50256, "content": "<|endoftext|>", "special": true}},
		}
		dir := t.TempDir()
		b, _ := json.Marshal(tj)
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		tok, err := LoadBPE(dir)
		if err != nil {
			t.Fatal(err)
		}
		checkGPT2(t, tok)
	}
}

// TestHandBuiltBPE states the ids of a vocabulary small enough to follow
// by hand: bytes get the ids 0..255 in ByteToUnicode order of the byte
// value, then "lo" = 256, "low" = 257, "Ġlow" = 258, "er" = 259.
func TestHandBuiltBPE(t *testing.T) {
	tok := handBuilt(t)
	for _, c := range []struct {
		in   string
		want []int
	}{
		// "lower": l o w e r -> lo w e r -> low e r -> low er (er ranks
		// after low) -> [257, 259].
		{"lower", []int{257, 259}},
		// " low": Ġ l o w -> Ġ lo w -> Ġ low -> Ġlow.
		{" low", []int{258}},
		// "slow": s lo w -> s low: no merge "s low".
		{"slow", []int{'s', 257}},
		// "lol": lo l.
		{"lol", []int{256, 'l'}},
		{"", nil},
		// Bytes outside ASCII: ByteToUnicode keeps the byte's id.
		{"\xff\x00", []int{0xff, 0x00}},
	} {
		if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func handBuilt(t testing.TB) *BPE {
	t.Helper()
	vocab := map[string]int{}
	for b, r := range ByteToUnicode() {
		vocab[string(r)] = b
	}
	vocab["lo"], vocab["low"], vocab["Ġlow"], vocab["er"] = 256, 257, 258, 259
	tok, err := NewBPE(vocab, [][2]string{{"l", "o"}, {"lo", "w"}, {"Ġ", "low"}, {"e", "r"}}, BPEOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestMergeOrder checks that the lowest-ranked pair is merged first, not
// the leftmost: with "b c" ranked before "a b", "abc" is a bc.
func TestMergeOrder(t *testing.T) {
	vocab := map[string]int{}
	for b, r := range ByteToUnicode() {
		vocab[string(r)] = b
	}
	vocab["bc"], vocab["ab"], vocab["aa"] = 256, 257, 258
	tok, err := NewBPE(vocab, [][2]string{{"b", "c"}, {"a", "b"}, {"a", "a"}}, BPEOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string][]int{
		"abc":   {'a', 256},
		"abab":  {257, 257},
		"aaa":   {258, 'a'}, // leftmost occurrence first, no overlap
		"aaaa":  {258, 258},
		"aabc":  {258, 256},
		"cabca": {'c', 'a', 256, 'a'},
	} {
		if got := tok.Encode(in); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestPretokenizeMatchesRegex compares the scanner with GPT-2's pattern as
// a regexp engine with lookahead splits the same strings
// (testdata/gpt2ref.js records them).
func TestPretokenizeMatchesRegex(t *testing.T) {
	type pc struct {
		Text   string   `json:"text"`
		Pieces []string `json:"pieces"`
	}
	for _, c := range readJSON[[]pc](t, "testdata/gpt2/pretokens.json") {
		if got := Pretokenize(c.Text); !slices.Equal(got, c.Pieces) {
			t.Errorf("Pretokenize(%q) = %q, the pattern gives %q", c.Text, got, c.Pieces)
		}
	}
}

// TestRoundTrip decodes the encoding of random byte strings (most not
// valid UTF-8) back to themselves, with both tokenizers.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "l", "o", "w", "e", "r", " ", "  ", "\n", "'s", "'", "1", "é", "日", "😀", "\xff", "\xe6", "\x00", "\t", "Ġ", "!"}
	toks := []Tokenizer{loadFixture(t), handBuilt(t), Bytes{}}
	for range 2000 {
		var sb strings.Builder
		for range r.IntN(20) {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := sb.String()
		if strings.Join(Pretokenize(s), "") != s {
			t.Fatalf("pieces of %q do not concatenate to it", s)
		}
		for _, tok := range toks {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("%T.Encode(%q) has id %d outside [0, %d)", tok, s, id, tok.VocabSize())
				}
			}
			got, err := tok.Decode(ids)
			if err != nil || got != s {
				t.Fatalf("%T: Decode(Encode(%q)) = %q, %v", tok, s, got, err)
			}
		}
	}
}

func TestLongPiece(t *testing.T) {
	// A million letters is one piece; merging must not be quadratic.
	tok := handBuilt(t)
	s := strings.Repeat("lo", 500000)
	ids := tok.Encode(s)
	if len(ids) != 500000 || ids[0] != 256 || ids[len(ids)-1] != 256 {
		t.Fatalf("Encode(lo x 500000): %d ids", len(ids))
	}
}

func TestBytes(t *testing.T) {
	var b Bytes
	if got := b.Encode("a\xff"); !slices.Equal(got, []int{97, 255}) {
		t.Errorf("Encode = %v", got)
	}
	if s, err := b.Decode([]int{104, 105, BytesEOS}); err != nil || s != "hi" {
		t.Errorf("Decode = %q, %v", s, err)
	}
	if _, err := b.Decode([]int{257}); err == nil {
		t.Error("Decode(257) succeeded")
	}
	if _, err := loadFixture(t).Decode([]int{50257}); err == nil {
		t.Error("BPE Decode(50257) succeeded")
	}
}

func TestBadFiles(t *testing.T) {
	bytesVocab := func() map[string]int {
		v := map[string]int{}
		for b, r := range ByteToUnicode() {
			v[string(r)] = b
		}
		return v
	}
	enc := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	good := enc(bytesVocab())
	missingByte := bytesVocab()
	delete(missingByte, "Ġ")
	dupID := bytesVocab()
	dupID["xx"] = 3
	for _, c := range []struct {
		name, vocab, merges string
	}{
		{"not json", "{", ""},
		{"not an object", "[1,2]", ""},
		{"string id", `{"a":"1"}`, ""},
		{"negative id", `{"a":-1}`, ""},
		{"huge id", `{"a":16777216}`, ""},
		{"fractional id", `{"a":1.5}`, ""},
		{"empty", `{}`, ""},
		{"missing byte", enc(missingByte), ""},
		{"duplicate id", enc(dupID), ""},
		{"merge of unknown tokens", good, "q z\n"},
		{"merge result not in vocabulary", good, "a b\n"},
		{"merge with three parts", good, "a b c\n"},
		{"merge with one part", good, "ab\n"},
	} {
		_, err := ReadBPE(strings.NewReader(c.vocab), strings.NewReader(c.merges), BPEOptions{})
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", c.name, err)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: message has a newline: %q", c.name, err)
		}
	}
	for _, c := range []struct{ name, tj string }{
		{"no model", `{}`},
		{"wordpiece", `{"model":{"type":"WordPiece","vocab":{}},"pre_tokenizer":{"type":"ByteLevel"}}`},
		{"normalizer", `{"normalizer":{"type":"NFC"},"model":{"type":"BPE","vocab":` + good + `},"pre_tokenizer":{"type":"ByteLevel"}}`},
		{"other pre-tokenizer", `{"model":{"type":"BPE","vocab":` + good + `},"pre_tokenizer":{"type":"Whitespace"}}`},
		{"no regex", `{"model":{"type":"BPE","vocab":` + good + `},"pre_tokenizer":{"type":"ByteLevel","use_regex":false}}`},
		{"byte fallback", `{"model":{"type":"BPE","vocab":` + good + `,"byte_fallback":true},"pre_tokenizer":{"type":"ByteLevel"}}`},
		{"bad merge", `{"model":{"type":"BPE","vocab":` + good + `,"merges":[3]},"pre_tokenizer":{"type":"ByteLevel"}}`},
		{"added token clash", `{"model":{"type":"BPE","vocab":` + good + `},"pre_tokenizer":{"type":"ByteLevel"},"added_tokens":[{"id":7,"content":"a"}]}`},
	} {
		if _, err := ReadTokenizerJSON(strings.NewReader(c.tj)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", c.name, err)
		}
	}
	if _, err := ReadTokenizerJSON(strings.NewReader(`{"model":{"type":"BPE","vocab":` + good + `},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":true}}`)); err != nil {
		t.Errorf("a valid tokenizer.json: %v", err)
	}
	if _, err := LoadBPE(t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither tokenizer.json nor vocab.json") {
		t.Errorf("empty directory: %v", err)
	}
}

func TestPrefixSpace(t *testing.T) {
	v := map[string]int{}
	for b, r := range ByteToUnicode() {
		v[string(r)] = b
	}
	tok, err := NewBPE(v, nil, BPEOptions{PrefixSpace: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("a"); !slices.Equal(got, []int{' ', 'a'}) {
		t.Errorf("Encode(a) with a prefix space = %v", got)
	}
	if !utf8.ValidString(string(rune(ByteToUnicode()[' ']))) {
		t.Fatal("byte map")
	}
}

// BenchmarkEncode encodes English prose with the GPT-2 fixture (the
// merges the recorded strings use): bytes per second of text.
func BenchmarkEncode(b *testing.B) {
	tok := loadFixture(b)
	var sb strings.Builder
	for _, c := range readJSON[[]gpt2Case](&testing.T{}, "testdata/gpt2/expected.json") {
		sb.WriteString(c.Text)
		sb.WriteString(" ")
	}
	s := strings.Repeat(sb.String(), 20)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		tok.Encode(s)
	}
}
