package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/seqtrain/seqtest"
	"github.com/dpmf-go/dpmf/text"
)

func runSeq(t *testing.T, m sequenceModel, tok text.Tokenizer, top int, in string) ([]map[string]json.RawMessage, error) {
	t.Helper()
	var out bytes.Buffer
	err := predictSequences(context.Background(), m, tok, top, strings.NewReader(in), "input", &out)
	var lines []map[string]json.RawMessage
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var v map[string]json.RawMessage
		if jerr := json.Unmarshal([]byte(l), &v); jerr != nil {
			t.Fatalf("output line %q is not JSON: %v", l, jerr)
		}
		lines = append(lines, v)
	}
	return lines, err
}

func TestPredictSequencesLogProbs(t *testing.T) {
	m := &seqtest.Bigram{Ctx: 4, V: 260}
	// The last real position decides; a long input keeps its last 4
	// tokens; text goes through the tokenizer ("A" is byte 65).
	lines, err := runSeq(t, m, text.Bytes{}, 0, `{"tokens": [3, 7]}`+"\n\n"+`{"tokens": [1,2,3,4,5,9]}`+"\n"+`{"text": "A"}`+"\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 {
		t.Fatalf("%d output lines, want 3", len(lines))
	}
	for i, last := range []int{7, 9, 65} {
		var got []float64
		if err := json.Unmarshal(lines[i]["logprobs"], &got); err != nil {
			t.Fatal(err)
		}
		want := m.LogProbs(last)
		if len(got) != len(want) {
			t.Fatalf("line %d: %d log-probabilities, want %d", i, len(got), len(want))
		}
		for j := range want {
			if math.Abs(got[j]-want[j]) > 1e-5*math.Max(1, math.Abs(want[j])) {
				t.Fatalf("line %d: logprob[%d] = %v, want %v", i, j, got[j], want[j])
			}
		}
	}
}

func TestPredictSequencesTop(t *testing.T) {
	m := &seqtest.Bigram{Ctx: 3, V: 257}
	lines, err := runSeq(t, m, text.Bytes{}, 3, `{"text": "ab"}`)
	if err != nil {
		t.Fatal(err)
	}
	var top []struct {
		ID      int     `json:"id"`
		Logprob float64 `json:"logprob"`
		Token   string  `json:"token"`
	}
	if err := json.Unmarshal(lines[0]["top"], &top); err != nil {
		t.Fatal(err)
	}
	// After 'b' (98) the bigram favours 99 ('c'), then 98 and 100 (equal:
	// the smaller id first).
	want := m.LogProbs('b')
	if len(top) != 3 || top[0].ID != 'c' || top[1].ID != 'b' || top[2].ID != 'd' || top[0].Token != "c" {
		t.Fatalf("top %+v", top)
	}
	if math.Abs(top[0].Logprob-want['c']) > 1e-5 {
		t.Errorf("logprob %v, want %v", top[0].Logprob, want['c'])
	}
}

func TestPredictSequencesClassifier(t *testing.T) {
	m := &seqtest.Bigram{Ctx: 3, V: 10, K: 3}
	lines, err := runSeq(t, m, nil, 0, `{"tokens": [1, 2]}`)
	if err != nil {
		t.Fatal(err)
	}
	var p []float64
	json.Unmarshal(lines[0]["probabilities"], &p)
	// Logits 0, 2, 4: softmax.
	z := 1 + math.Exp(2) + math.Exp(4)
	if string(lines[0]["class"]) != "2" || len(p) != 3 || math.Abs(p[2]-math.Exp(4)/z) > 1e-6 {
		t.Errorf("class %s probabilities %v", lines[0]["class"], p)
	}
	if _, err := runSeq(t, m, nil, 2, `{"tokens": [1]}`); err == nil {
		t.Error("-top accepted for a classifier")
	}
}

func TestPredictSequencesBadInput(t *testing.T) {
	m := &seqtest.Bigram{Ctx: 4, V: 10}
	for _, c := range []struct{ in, msg string }{
		{`{"tokens": [10]}`, "line 1: token 0 is 10, want an integer id in [0, 10)"},
		{`{"tokens": [1.5]}`, "token 0 is 1.5"},
		{`{"tokens": [-1]}`, "token 0 is -1"},
		{`{"tokens": []}`, "no tokens"},
		{"\n" + `{"text": "a"}`, `line 2: a "text" input needs -tokenizer`},
		{`{"tokens": [1], "text": "a"}`, "not both"},
		{`[1,2]`, `want {"tokens"`},
		{`{}`, `want {"tokens"`},
		{`{"tokens": [1]} x`, `want {"tokens"`},
	} {
		_, err := runSeq(t, m, nil, 0, c.in)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want a one-line usage error with %q", c.in, err, c.msg)
		}
	}
	long := `{"tokens": [1]}` + "\n" + strings.Repeat(" ", maxSequenceLine+1)
	if _, err := runSeq(t, m, nil, 0, long); err == nil || !strings.Contains(err.Error(), "line 2 is longer than 16 MiB") {
		t.Errorf("a line too long: %v", err)
	}
	if _, err := runSeq(t, m, text.Bytes{}, 0, `{"tokens": [1]}`); err == nil {
		t.Error("a tokenizer larger than the model's vocabulary accepted")
	}
}

// TestPredictSequencesBatches checks that inputs beyond one batch are all
// answered, in order.
func TestPredictSequencesBatches(t *testing.T) {
	m := &seqtest.Bigram{Ctx: 2, V: 8}
	var in strings.Builder
	n := predictBatch*2 + 5
	for i := range n {
		in.WriteString(`{"tokens": [` + string(rune('0'+i%7)) + "]}\n")
	}
	lines, err := runSeq(t, m, nil, 1, in.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != n || m.Calls != 3 {
		t.Fatalf("%d lines in %d calls, want %d in 3", len(lines), m.Calls, n)
	}
	for i, l := range lines {
		var top []struct{ ID int }
		json.Unmarshal(l["top"], &top)
		if top[0].ID != i%7+1 {
			t.Fatalf("line %d: top id %d, want %d", i, top[0].ID, i%7+1)
		}
	}
}

// TestPredictTopNeedsSequenceModel: -top and -tokenizer are refused for
// an image model rather than ignored.
func TestPredictTopNeedsSequenceModel(t *testing.T) {
	m, err := models.NewMLP([3]int{1, 2, 2}, []int{3}, 2, nn.Tanh, 1)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mlp")
	if err := models.WriteFile(path, m, models.Metadata{Dataset: "toy", Classes: 2}); err != nil {
		t.Fatal(err)
	}
	for _, flag := range [][]string{{"-top", "3"}, {"-tokenizer", "bytes"}} {
		code, _, stderr := runCLI(t, append([]string{"predict", "-model-file", path}, flag...)...)
		if code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "apply to models over token ids") {
			t.Errorf("%v: exit %d, stderr %q", flag, code, stderr)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "-model-file", path, "-data", "text", "-dir", path}, "is not a model over token ids"},
		{[]string{"eval", "-model-file", path, "-tokenizer", "bytes"}, "-tokenizer only apply to -data text"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, stderr)
		}
	}
}
