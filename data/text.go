package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/text"
)

// TextDocument is one document of a text corpus: its text, its user (the
// person it comes from, for user-level privacy; "" for none) and its
// label (for sequence classification; "" for none).
type TextDocument struct {
	Text, User, Label string
}

// TextFormat is how a text file holds its documents.
type TextFormat int

const (
	// TextAuto picks by extension: .jsonl, .ndjson and .json files are
	// JSON lines, others plain text.
	TextAuto TextFormat = iota
	// TextPlain: the whole file is one document.
	TextPlain
	// TextLines: every line that is not blank is a document (a verse, a
	// sentence), its newline dropped.
	TextLines
	// TextJSONL: one JSON object per line, the text in a string field.
	TextJSONL
	// TextFortune: the fortune(6) cookie format, documents separated by
	// lines holding only "%"; a document's user is its attribution (the
	// text after a line starting with "--" or "―", whitespace
	// collapsed), "" when it has none.
	TextFortune
)

// ParseTextFormat parses "auto", "plain", "lines", "jsonl" or "fortune".
func ParseTextFormat(s string) (TextFormat, error) {
	switch s {
	case "", "auto":
		return TextAuto, nil
	case "plain", "text", "txt":
		return TextPlain, nil
	case "lines":
		return TextLines, nil
	case "jsonl", "json":
		return TextJSONL, nil
	case "fortune":
		return TextFortune, nil
	}
	return 0, invalidf("text format %q: want auto, plain, lines, jsonl or fortune", s)
}

// MaxTextBytes bounds what one text file or JSON line may hold (1 GiB).
const MaxTextBytes = 1 << 30

// TextReadOptions say how to read text files: the format and, for JSON
// lines, the field names.
type TextReadOptions struct {
	Format TextFormat
	// TextField names the JSON field holding a document's text (default
	// "text"): a string.
	TextField string
	// UserField names the JSON field holding its user ("" for none): a
	// string or a number, present on every line.
	UserField string
	// LabelField names the JSON field holding its label ("" for none): a
	// string or an integer, present on every line.
	LabelField string
}

// ReadText reads the documents of one text file. name is for messages
// and for TextAuto's choice.
func ReadText(r io.Reader, name string, opts TextReadOptions) ([]TextDocument, error) {
	f := opts.Format
	if f == TextAuto {
		f = TextPlain
		switch strings.ToLower(filepath.Ext(name)) {
		case ".jsonl", ".ndjson", ".json":
			f = TextJSONL
		}
	}
	switch f {
	case TextPlain:
		b, err := readAllLimited(r, name)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			return nil, nil
		}
		return []TextDocument{{Text: string(b)}}, nil
	case TextFortune:
		b, err := readAllLimited(r, name)
		if err != nil {
			return nil, err
		}
		return splitFortunes(string(b)), nil
	case TextLines:
		b, err := readAllLimited(r, name)
		if err != nil {
			return nil, err
		}
		var docs []TextDocument
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSuffix(l, "\r"); strings.TrimSpace(l) != "" {
				docs = append(docs, TextDocument{Text: l})
			}
		}
		return docs, nil
	case TextJSONL:
		return readJSONL(r, name, opts)
	}
	return nil, invalidf("read text: format %d", f)
}

func readAllLimited(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxTextBytes+1))
	if err != nil {
		return nil, fmt.Errorf("data: reading %s: %w", name, err)
	}
	if len(b) > MaxTextBytes {
		return nil, formatf("%s: more than %d MiB of text", name, MaxTextBytes>>20)
	}
	return b, nil
}

func splitFortunes(s string) []TextDocument {
	var docs []TextDocument
	var cur []string
	flush := func() {
		t := strings.Join(cur, "\n")
		cur = cur[:0]
		if strings.TrimSpace(t) == "" {
			return
		}
		docs = append(docs, TextDocument{Text: t + "\n", User: attribution(t)})
	}
	for _, line := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
		if line == "%" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return docs
}

// attribution is the text after a fortune's last line that starts (after
// whitespace) with "--" or "―", through the end, whitespace collapsed.
func attribution(t string) string {
	lines := strings.Split(t, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		for _, dash := range []string{"--", "―"} {
			if rest, ok := strings.CutPrefix(l, dash); ok {
				a := strings.Join(append([]string{rest}, lines[i+1:]...), " ")
				return strings.Join(strings.Fields(a), " ")
			}
		}
	}
	return ""
}

func readJSONL(r io.Reader, name string, opts TextReadOptions) ([]TextDocument, error) {
	field := opts.TextField
	if field == "" {
		field = "text"
	}
	var docs []TextDocument
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), MaxTextBytes)
	total, line := 0, 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if total += len(b); total > MaxTextBytes {
			return nil, formatf("%s: line %d: more than %d MiB of text in the file", name, line, MaxTextBytes>>20)
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		d, err := parseTextLine(b, field, opts)
		if err != nil {
			return nil, formatf("%s: line %d: %v", name, line, err)
		}
		docs = append(docs, d)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, formatf("%s: line %d: longer than %d MiB", name, line+1, MaxTextBytes>>20)
		}
		return nil, fmt.Errorf("data: reading %s: %w", name, err)
	}
	return docs, nil
}

func parseTextLine(b []byte, field string, opts TextReadOptions) (TextDocument, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return TextDocument{}, fmt.Errorf("want a JSON object: %v", err)
	}
	var d TextDocument
	raw, ok := obj[field]
	if !ok {
		return d, fmt.Errorf("no %q field", field)
	}
	if err := json.Unmarshal(raw, &d.Text); err != nil {
		return d, fmt.Errorf("field %q is not a string", field)
	}
	var err error
	if opts.UserField != "" {
		if d.User, err = scalarField(obj, opts.UserField); err != nil {
			return d, err
		}
	}
	if opts.LabelField != "" {
		if d.Label, err = scalarField(obj, opts.LabelField); err != nil {
			return d, err
		}
	}
	return d, nil
}

// scalarField returns a string field as is and a number as written.
func scalarField(obj map[string]json.RawMessage, name string) (string, error) {
	raw, ok := obj[name]
	if !ok {
		return "", fmt.Errorf("no %q field", name)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "", fmt.Errorf("field %q is empty", name)
		}
		return s, nil
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String(), nil
	}
	return "", fmt.Errorf("field %q is neither a string nor a number", name)
}

// LoadText reads the documents of a text file, or of every regular file
// of a directory (in name order, skipping hidden files, symbolic links and
// fortune's .dat index files).
func LoadText(path string, opts TextReadOptions) ([]TextDocument, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, invalidf("text: %v", err)
	}
	files := []string{path}
	if st.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, invalidf("text: %v", err)
		}
		files = files[:0]
		for _, e := range ents {
			n := e.Name()
			if !e.Type().IsRegular() || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".dat") {
				continue
			}
			files = append(files, filepath.Join(path, n))
		}
		if len(files) == 0 {
			return nil, invalidf("text: directory %s has no files", path)
		}
	}
	var docs []TextDocument
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			return nil, invalidf("text: %v", err)
		}
		d, err := ReadText(f, p, opts)
		f.Close()
		if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
	}
	if len(docs) == 0 {
		return nil, formatf("%s: no text", path)
	}
	return docs, nil
}

// TextTask is what a text data set is for.
type TextTask int

const (
	// NextToken: language modelling; position t of an example predicts
	// its token t+1.
	NextToken TextTask = iota
	// Classify: one label per document.
	Classify
)

// TextPad is the id that pads an example after its last token.
const TextPad = -1

// TextDataOptions say how to turn documents into examples.
type TextDataOptions struct {
	Task TextTask
	// Context is the number of token positions of an example (at least
	// 2).
	Context int
	// UserLevel keeps every example within one user's documents and sets
	// the data set's Owners (users numbered 0, 1, ... by first document);
	// a document without a user is a user of its own.
	UserLevel bool
	// Labels are the class names of Classify, in class order (TextLabels
	// lists a corpus's); a document's label must be one of them.
	Labels []string
}

// NewTextDataset tokenizes documents into a Dataset of token ids: each
// example holds Context ids as float32 (Shape {Context, 1, 1}), right-padded
// with TextPad.
//
// NextToken packs the documents, each followed by the tokenizer's end of
// text, into one stream (one per user with UserLevel) and cuts it into
// examples that overlap by one token, example k holding tokens
// [k(C-1), k(C-1)+C): every token after a stream's first is a target
// exactly once. Labels are 0 and Classes is the vocabulary size. A stream's
// last example is padded; a stream of one token makes none.
//
// Classify makes one example per document, its first Context tokens,
// labelled by the index of its label in Labels.
func NewTextDataset(docs []TextDocument, tok text.Tokenizer, opts TextDataOptions) (*Dataset, error) {
	c := opts.Context
	if c < 2 || c > 1<<20 {
		return nil, invalidf("text: context %d, want 2 to %d tokens", c, 1<<20)
	}
	if len(docs) == 0 {
		return nil, invalidf("text: no documents")
	}
	vocab := tok.VocabSize()
	if vocab <= 0 || vocab > text.MaxVocab {
		return nil, invalidf("text: vocabulary of %d ids", vocab)
	}
	users := make([]int64, len(docs))
	if opts.UserLevel {
		ids := map[string]int64{}
		for i, d := range docs {
			if d.User == "" {
				users[i] = int64(len(ids))
				ids["\x00"+strconv.Itoa(i)] = users[i]
				continue
			}
			id, ok := ids[d.User]
			if !ok {
				id = int64(len(ids))
				ids[d.User] = id
			}
			users[i] = id
		}
	}
	var x []float32
	var y []int
	var owners []int64
	row := func(toks []int, owner int64) {
		for k := range c {
			if k < len(toks) {
				x = append(x, float32(toks[k]))
			} else {
				x = append(x, TextPad)
			}
		}
		owners = append(owners, owner)
	}
	classes := vocab
	switch opts.Task {
	case NextToken:
		eos, hasEOS := tok.EOS()
		var stream []int
		flush := func(owner int64) {
			for start := 0; start < len(stream)-1; start += c - 1 {
				row(stream[start:min(start+c, len(stream))], owner)
				y = append(y, 0)
			}
			stream = stream[:0]
		}
		order := docOrder(users, opts.UserLevel)
		for k, i := range order {
			stream = append(stream, tok.Encode(docs[i].Text)...)
			if hasEOS {
				stream = append(stream, eos)
			}
			if k == len(order)-1 || opts.UserLevel && users[order[k+1]] != users[i] {
				flush(users[i])
			}
		}
	case Classify:
		if len(opts.Labels) == 0 {
			return nil, invalidf("text: classification needs the class labels")
		}
		label := make(map[string]int, len(opts.Labels))
		for i, l := range opts.Labels {
			label[l] = i
		}
		classes = len(opts.Labels)
		for i, d := range docs {
			l, ok := label[d.Label]
			if !ok {
				return nil, formatf("text: document %d has label %.40q, not one of the %d classes", i+1, d.Label, len(opts.Labels))
			}
			toks := tok.Encode(d.Text)
			if len(toks) == 0 {
				return nil, formatf("text: document %d has no text", i+1)
			}
			row(toks, users[i])
			y = append(y, l)
		}
	default:
		return nil, invalidf("text: task %d", opts.Task)
	}
	if len(y) == 0 {
		return nil, formatf("text: no example of %d tokens or more", 2)
	}
	d, err := NewDataset(x, y, Shape{C: c, H: 1, W: 1}, classes)
	if err != nil {
		return nil, err
	}
	if opts.UserLevel {
		d.Owners = owners
	}
	return d, nil
}

// docOrder lists the documents in order, grouped by user (users in order
// of first document) when byUser.
func docOrder(users []int64, byUser bool) []int {
	order := make([]int, len(users))
	for i := range order {
		order[i] = i
	}
	if byUser {
		slices.SortStableFunc(order, func(a, b int) int { return int(users[a] - users[b]) })
	}
	return order
}

// TextLabels lists the distinct labels of docs, sorted (numerically when
// every label is an integer), for TextDataOptions.Labels.
//
// Not private: the list is a function of the documents (a label only one
// person used reveals that they are in the data). For a private run, give
// the labels from outside the data, as the task defines them.
func TextLabels(docs []TextDocument) []string {
	seen := map[string]bool{}
	var out []string
	numeric := true
	for _, d := range docs {
		if !seen[d.Label] {
			seen[d.Label] = true
			out = append(out, d.Label)
			if _, err := strconv.ParseInt(d.Label, 10, 64); err != nil {
				numeric = false
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if numeric {
			x, _ := strconv.ParseInt(a, 10, 64)
			y, _ := strconv.ParseInt(b, 10, 64)
			return cmpInt(x, y)
		}
		return strings.Compare(a, b)
	})
	return out
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// SplitText splits documents into a training and a held-out part, about
// fraction of them held out, fixed by seed. Documents with a user are
// split by user (all of a user's documents on one side), so a held-out
// score measures users the model never saw; a document without a user is
// its own.
func SplitText(docs []TextDocument, fraction float64, seed uint64) (train, test []TextDocument, err error) {
	if !(fraction > 0 && fraction < 1) {
		return nil, nil, invalidf("split text: fraction %v, want it in (0, 1)", fraction)
	}
	rng := mrand.New(mrand.NewPCG(seed, 0x7e47))
	held := map[string]bool{}
	for i, d := range docs {
		key := d.User
		if key == "" {
			key = "\x00" + strconv.Itoa(i)
		}
		h, ok := held[key]
		if !ok {
			h = rng.Float64() < fraction
			held[key] = h
		}
		if h {
			test = append(test, d)
		} else {
			train = append(train, d)
		}
	}
	if len(train) == 0 || len(test) == 0 {
		return nil, nil, invalidf("split text: %d documents split into %d and %d; want some on each side", len(docs), len(train), len(test))
	}
	return train, test, nil
}
