package text

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MaxFileBytes bounds a vocabulary, merges or tokenizer.json file.
const MaxFileBytes = 64 << 20

// BPEOptions are the settings of a BPE not read from its files.
type BPEOptions struct {
	// PrefixSpace puts a space before a text that does not start with
	// one, as tokenizer.json's add_prefix_space (GPT-2 leaves it off).
	PrefixSpace bool
}

// LoadBPE reads the GPT-2-style tokenizer of a Hugging Face model
// directory: tokenizer.json if the directory has it, otherwise vocab.json
// and merges.txt.
func LoadBPE(dir string) (*BPE, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, invalidf("tokenizer directory: %v", err)
	} else if !st.IsDir() {
		return nil, invalidf("tokenizer directory %s is not a directory", dir)
	}
	tj := filepath.Join(dir, "tokenizer.json")
	if f, err := os.Open(tj); err == nil {
		defer f.Close()
		t, err := ReadTokenizerJSON(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tj, err)
		}
		return t, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, invalidf("%v", err)
	}
	vf, err := os.Open(filepath.Join(dir, "vocab.json"))
	if err != nil {
		return nil, invalidf("tokenizer directory %s has neither tokenizer.json nor vocab.json and merges.txt: %v", dir, err)
	}
	defer vf.Close()
	mf, err := os.Open(filepath.Join(dir, "merges.txt"))
	if err != nil {
		return nil, invalidf("tokenizer directory %s has vocab.json but no merges.txt: %v", dir, err)
	}
	defer mf.Close()
	t, err := ReadBPE(vf, mf, BPEOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return t, nil
}

// readLimited reads all of r, refusing more than MaxFileBytes.
func readLimited(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("text: reading %s: %w", what, err)
	}
	if len(b) > MaxFileBytes {
		return nil, formatf("%s is larger than %d MiB", what, MaxFileBytes>>20)
	}
	return b, nil
}

// ReadBPE reads a GPT-2 vocabulary (vocab.json: a JSON object from token
// to id) and merges list (merges.txt: one "left right" pair per line, in
// rank order, after an optional "#version" line).
func ReadBPE(vocab, merges io.Reader, opts BPEOptions) (*BPE, error) {
	vb, err := readLimited(vocab, "vocab.json")
	if err != nil {
		return nil, err
	}
	v, err := parseVocab(vb)
	if err != nil {
		return nil, fmt.Errorf("vocab.json: %w", err)
	}
	mb, err := readLimited(merges, "merges.txt")
	if err != nil {
		return nil, err
	}
	var pairs [][2]string
	sc := bufio.NewScanner(bytes.NewReader(mb))
	sc.Buffer(nil, MaxFileBytes)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimRight(sc.Text(), "\r")
		if s == "" || line == 1 && strings.HasPrefix(s, "#version") {
			continue
		}
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return nil, formatf("merges.txt line %d: %.40q is not two tokens separated by one space", line, s)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	if err := sc.Err(); err != nil {
		return nil, formatf("merges.txt: %v", err)
	}
	return NewBPE(v, pairs, opts)
}

func parseVocab(b []byte) (map[string]int, error) {
	var v map[string]int
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, formatf("want a JSON object from token to integer id: %v", err)
	}
	return v, nil
}

// tokenizerJSON is the part of a Hugging Face tokenizer.json that a
// GPT-2-style tokenizer uses.
type tokenizerJSON struct {
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer *preTokenizer   `json:"pre_tokenizer"`
	Model        *tokenizerModel `json:"model"`
	AddedTokens  []addedToken    `json:"added_tokens"`
}

type preTokenizer struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       *bool  `json:"use_regex"`
}

type tokenizerModel struct {
	Type                    string            `json:"type"`
	Vocab                   json.RawMessage   `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
}

type addedToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
}

// ReadTokenizerJSON reads a Hugging Face tokenizer.json whose model is a
// byte-level BPE with GPT-2's pre-tokenizer (GPT-2, DistilGPT-2, GPT-Neo
// and others); merges may be written "left right" or ["left", "right"].
// Tokenizers with a normalizer or another pre-tokenizer (Llama 3's and
// GPT-4's split text differently) are refused rather than encoded wrongly.
func ReadTokenizerJSON(r io.Reader) (*BPE, error) {
	b, err := readLimited(r, "tokenizer.json")
	if err != nil {
		return nil, err
	}
	var tj tokenizerJSON
	if err := json.Unmarshal(b, &tj); err != nil {
		return nil, formatf("tokenizer.json: %v", err)
	}
	m := tj.Model
	switch {
	case m == nil:
		return nil, formatf("tokenizer.json has no model")
	case m.Type != "" && m.Type != "BPE":
		return nil, formatf("tokenizer.json model type %.40q: only BPE is supported", m.Type)
	case len(tj.Normalizer) > 0 && string(tj.Normalizer) != "null":
		return nil, formatf("tokenizer.json has a normalizer: only GPT-2's byte-level BPE (no normalizer) is supported")
	case tj.PreTokenizer == nil || tj.PreTokenizer.Type != "ByteLevel" || tj.PreTokenizer.UseRegex != nil && !*tj.PreTokenizer.UseRegex:
		return nil, formatf("tokenizer.json pre_tokenizer: only GPT-2's ByteLevel pre-tokenizer (with its regex) is supported")
	case m.ByteFallback || m.IgnoreMerges || m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, formatf("tokenizer.json model: byte_fallback, ignore_merges and subword prefixes or suffixes are not supported (GPT-2's BPE has none)")
	}
	v, err := parseVocab(m.Vocab)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json vocab: %w", err)
	}
	for _, a := range tj.AddedTokens {
		if id, ok := v[a.Content]; ok && id != a.ID {
			return nil, formatf("tokenizer.json added token %.40q has id %d, the vocabulary %d", a.Content, a.ID, id)
		}
		v[a.Content] = a.ID
	}
	pairs := make([][2]string, 0, len(m.Merges))
	for i, raw := range m.Merges {
		var s string
		var p [2]string
		if json.Unmarshal(raw, &s) == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, formatf("tokenizer.json merge %d: %.40q is not two tokens separated by one space", i, s)
			}
			p = [2]string{a, b}
		} else if err := json.Unmarshal(raw, &p); err != nil {
			return nil, formatf("tokenizer.json merge %d: want \"left right\" or [\"left\", \"right\"]", i)
		}
		pairs = append(pairs, p)
	}
	return NewBPE(v, pairs, BPEOptions{PrefixSpace: tj.PreTokenizer.AddPrefixSpace})
}

// NewBPE returns the byte-level BPE of a vocabulary (token, written with
// ByteToUnicode's characters, to id) and merges in rank order. The
// vocabulary must hold every byte's token and every merge's parts and
// result; ids must be distinct and below MaxVocab.
func NewBPE(vocab map[string]int, merges [][2]string, opts BPEOptions) (*BPE, error) {
	if len(vocab) == 0 {
		return nil, formatf("empty vocabulary")
	}
	maxID := -1
	for tok, id := range vocab {
		if id < 0 || id >= MaxVocab {
			return nil, formatf("token %.40q has id %d, outside [0, %d)", tok, id, MaxVocab)
		}
		maxID = max(maxID, id)
	}
	t := &BPE{vocab: vocab, raw: make(map[int32][]byte, len(vocab)), size: maxID + 1, eos: -1,
		prefixSpace: opts.PrefixSpace, merges: make(map[symbolPair]merged, len(merges))}
	inv := unicodeToByte()
	owner := make(map[int32]string, len(vocab))
	for tok, id := range vocab {
		if _, dup := t.raw[int32(id)]; dup {
			a, b := owner[int32(id)], tok
			if b < a {
				a, b = b, a
			}
			return nil, formatf("id %d is given to both %.40q and %.40q", id, a, b)
		}
		t.raw[int32(id)] = rawBytes(tok, inv)
		owner[int32(id)] = tok
	}
	for b, r := range ByteToUnicode() {
		id, ok := vocab[string(r)]
		if !ok {
			return nil, formatf("no token for byte 0x%02x (%q): a byte-level BPE needs all 256", b, r)
		}
		t.byteID[b] = int32(id)
	}
	for i, m := range merges {
		a, okA := vocab[m[0]]
		b, okB := vocab[m[1]]
		c, okC := vocab[m[0]+m[1]]
		if m[0] == "" || m[1] == "" || !okA || !okB || !okC {
			return nil, formatf("merge %d (%.40q %.40q): its parts and result must be non-empty tokens of the vocabulary", i, m[0], m[1])
		}
		k := symbolPair{int32(a), int32(b)}
		if _, dup := t.merges[k]; dup {
			continue // the first, lower rank, wins
		}
		t.merges[k] = merged{rank: int32(i), id: int32(c)}
	}
	if id, ok := vocab["<|endoftext|>"]; ok {
		t.eos = id
	}
	return t, nil
}
