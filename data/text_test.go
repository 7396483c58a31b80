package data

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/text"
)

// ids turns a string of bytes into token ids with 'E' for the end of text
// and '_' for padding, so examples read as strings.
func ids(s string) []float32 {
	var out []float32
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case 'E':
			out = append(out, text.BytesEOS)
		case '_':
			out = append(out, TextPad)
		default:
			out = append(out, float32(s[i]))
		}
	}
	return out
}

func TestNextTokenPacking(t *testing.T) {
	for _, c := range []struct {
		name    string
		docs    []TextDocument
		context int
		user    bool
		want    []string
		owners  []int64
	}{
		// a b c E d e E cut into rows of 3 overlapping by one.
		{"packed", []TextDocument{{Text: "abc"}, {Text: "de"}}, 3, false, []string{"abc", "cEd", "deE"}, nil},
		// The last row is padded; nothing is left to predict after E.
		{"padded", []TextDocument{{Text: "abc"}}, 3, false, []string{"abc", "cE_"}, nil},
		{"context 2", []TextDocument{{Text: "ab"}}, 2, false, []string{"ab", "bE"}, nil},
		// Per user: x's documents (first and third) form one stream, y's
		// another; no row mixes users.
		{"users", []TextDocument{{Text: "ab", User: "x"}, {Text: "c", User: "y"}, {Text: "d", User: "x"}}, 4, true,
			[]string{"abEd", "dE__", "cE__"}, []int64{0, 0, 1}},
		// A document without a user is a user of its own.
		{"no user", []TextDocument{{Text: "a"}, {Text: "b", User: "x"}, {Text: "c"}}, 3, true,
			[]string{"aE_", "bE_", "cE_"}, []int64{0, 1, 2}},
	} {
		d, err := NewTextDataset(c.docs, text.Bytes{}, TextDataOptions{Context: c.context, UserLevel: c.user})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var want []float32
		for _, r := range c.want {
			want = append(want, ids(r)...)
		}
		if !slices.Equal(d.X, want) || d.Len() != len(c.want) {
			t.Errorf("%s: X = %v, want %v", c.name, d.X, want)
		}
		if d.Shape != (Shape{C: c.context, H: 1, W: 1}) || d.Classes != 257 {
			t.Errorf("%s: shape %v classes %d", c.name, d.Shape, d.Classes)
		}
		if !slices.Equal(d.Owners, c.owners) {
			t.Errorf("%s: owners %v, want %v", c.name, d.Owners, c.owners)
		}
		for _, l := range d.Y {
			if l != 0 {
				t.Errorf("%s: label %d, want 0", c.name, l)
			}
		}
	}
}

// TestNextTokenTargetsOnce checks that every token of a stream after its
// first is predicted exactly once, for many document and context lengths.
func TestNextTokenTargetsOnce(t *testing.T) {
	for c := 2; c <= 9; c++ {
		for n := 1; n <= 30; n++ {
			doc := strings.Repeat("x", n)
			d, err := NewTextDataset([]TextDocument{{Text: doc}}, text.Bytes{}, TextDataOptions{Context: c})
			if err != nil {
				t.Fatal(err)
			}
			targets := 0
			for i := range d.Len() {
				ex := d.Example(i)
				real := slices.Index(ex, TextPad)
				if real < 0 {
					real = c
				}
				if real < 2 {
					t.Fatalf("c=%d n=%d: example %d has %d tokens", c, n, i, real)
				}
				targets += real - 1
			}
			if targets != n { // n+1 tokens with the end of text
				t.Errorf("c=%d n=%d: %d targets, want %d", c, n, targets, n)
			}
		}
	}
}

func TestClassifyDataset(t *testing.T) {
	docs := []TextDocument{{Text: "good", Label: "pos"}, {Text: "bad stuff", Label: "neg"}, {Text: "ok", Label: "pos", User: "u"}}
	labels := TextLabels(docs)
	if !slices.Equal(labels, []string{"neg", "pos"}) {
		t.Fatalf("labels %v", labels)
	}
	d, err := NewTextDataset(docs, text.Bytes{}, TextDataOptions{Task: Classify, Context: 4, Labels: labels, UserLevel: true})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(ids("good"), ids("bad ")...), ids("ok__")...)
	if !slices.Equal(d.X, want) || !slices.Equal(d.Y, []int{1, 0, 1}) || d.Classes != 2 {
		t.Errorf("X %v Y %v classes %d", d.X, d.Y, d.Classes)
	}
	if !slices.Equal(d.Owners, []int64{0, 1, 2}) {
		t.Errorf("owners %v", d.Owners)
	}
	if _, err := NewTextDataset(docs, text.Bytes{}, TextDataOptions{Task: Classify, Context: 4, Labels: []string{"pos"}}); !errors.Is(err, ErrFormat) {
		t.Errorf("unknown label: %v", err)
	}
	if _, err := NewTextDataset([]TextDocument{{Label: "pos"}}, text.Bytes{}, TextDataOptions{Task: Classify, Context: 4, Labels: labels}); !errors.Is(err, ErrFormat) {
		t.Errorf("empty document: %v", err)
	}
	if got := TextLabels([]TextDocument{{Label: "10"}, {Label: "9"}, {Label: "2"}}); !slices.Equal(got, []string{"2", "9", "10"}) {
		t.Errorf("numeric labels sorted %v", got)
	}
	for _, c := range []int{0, 1, -3} {
		if _, err := NewTextDataset(docs, text.Bytes{}, TextDataOptions{Context: c}); err == nil {
			t.Errorf("context %d accepted", c)
		}
	}
}

func TestReadJSONL(t *testing.T) {
	in := `{"text": "hello", "user": "ann", "label": 1}

{"text": "bye\n", "user": 42, "label": "x", "extra": [1]}
`
	docs, err := ReadText(strings.NewReader(in), "a.jsonl", TextReadOptions{UserField: "user", LabelField: "label"})
	if err != nil {
		t.Fatal(err)
	}
	want := []TextDocument{{"hello", "ann", "1"}, {"bye\n", "42", "x"}}
	if !slices.Equal(docs, want) {
		t.Errorf("docs %q, want %q", docs, want)
	}
	for _, c := range []struct{ in, msg string }{
		{`{"text": 3}`, "line 1: field \"text\" is not a string"},
		{"\n{\"txt\": \"a\"}", "line 2: no \"text\" field"},
		{`[1]`, "line 1: want a JSON object"},
		{`{"text": "a"}`, "line 1: no \"user\" field"},
		{`{"text": "a", "user": ""}`, "line 1: field \"user\" is empty"},
		{`{"text": "a", "user": [1]}`, "field \"user\" is neither a string nor a number"},
	} {
		_, err := ReadText(strings.NewReader(c.in), "b.jsonl", TextReadOptions{UserField: "user"})
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "b.jsonl") {
			t.Errorf("%q: %v, want ErrFormat with %q", c.in, err, c.msg)
		}
	}
}

func TestReadFortunes(t *testing.T) {
	in := "Q: Why?\nA: Because.\n%\nLife is what happens.\n\t\t-- John\n\tLennon\n%\n%\nNo author.\n"
	docs, err := ReadText(strings.NewReader(in), "cookies", TextReadOptions{Format: TextFortune})
	if err != nil {
		t.Fatal(err)
	}
	want := []TextDocument{
		{Text: "Q: Why?\nA: Because.\n"},
		{Text: "Life is what happens.\n\t\t-- John\n\tLennon\n", User: "John Lennon"},
		{Text: "No author.\n\n"},
	}
	if !slices.Equal(docs, want) {
		t.Errorf("docs %q\nwant %q", docs, want)
	}
}

func TestReadLines(t *testing.T) {
	docs, err := ReadText(strings.NewReader("Ge1:1 In the beginning\r\n\n  \nGe1:2 And the earth"), "kjv", TextReadOptions{Format: TextLines})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(docs, []TextDocument{{Text: "Ge1:1 In the beginning"}, {Text: "Ge1:2 And the earth"}}) {
		t.Errorf("docs %q", docs)
	}
}

func TestLoadTextDir(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"b.txt": "second", "a.txt": "first", "a.dat": "index", ".hidden": "x"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	docs, err := LoadText(dir, TextReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(docs, []TextDocument{{Text: "first"}, {Text: "second"}}) {
		t.Errorf("docs %q", docs)
	}
	if _, err := LoadText(filepath.Join(dir, "none"), TextReadOptions{}); err == nil {
		t.Error("missing file accepted")
	}
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	if _, err := LoadText(empty, TextReadOptions{}); !errors.Is(err, ErrFormat) {
		t.Errorf("empty file: %v", err)
	}
}

func TestSplitText(t *testing.T) {
	var docs []TextDocument
	for i := range 200 {
		docs = append(docs, TextDocument{Text: "t", User: string(rune('a' + i%20))})
	}
	tr, te, err := SplitText(docs, 0.25, 7)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, d := range tr {
		in[d.User] = true
	}
	for _, d := range te {
		if in[d.User] {
			t.Fatalf("user %q on both sides", d.User)
		}
	}
	tr2, _, _ := SplitText(docs, 0.25, 7)
	if !slices.Equal(tr, tr2) {
		t.Error("same seed, different split")
	}
	if len(te) == 0 || len(te) == 200 {
		t.Errorf("held out %d of 200", len(te))
	}
}

// FuzzReadText reads arbitrary bytes as JSON lines and as fortune
// cookies and packs what it reads: a bad file is an ErrFormat error, never
// a panic, and every example holds ids of the vocabulary or padding.
func FuzzReadText(f *testing.F) {
	f.Add([]byte("{\"text\": \"hello\", \"user\": 1, \"label\": \"a\"}\n{\"text\": \"x\", \"user\": \"b\", \"label\": 2}\n"), uint8(3))
	f.Add([]byte("a cookie\n\t-- Someone\n%\nanother\n"), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, context uint8) {
		for _, format := range []TextFormat{TextJSONL, TextFortune, TextLines} {
			docs, err := ReadText(strings.NewReader(string(b)), "fuzz", TextReadOptions{Format: format, UserField: "user", LabelField: "label"})
			if err != nil {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("error not ErrFormat: %v", err)
				}
				continue
			}
			if len(docs) == 0 {
				continue
			}
			for _, task := range []TextTask{NextToken, Classify} {
				d, err := NewTextDataset(docs, text.Bytes{}, TextDataOptions{Task: task, Context: int(context%8) + 2, UserLevel: true, Labels: TextLabels(docs)})
				if err != nil {
					if !errors.Is(err, ErrFormat) {
						t.Fatalf("error not ErrFormat: %v", err)
					}
					continue
				}
				for _, v := range d.X {
					if v != TextPad && (v < 0 || v > text.BytesEOS || v != float32(int(v))) {
						t.Fatalf("id %v", v)
					}
				}
			}
		}
	})
}
