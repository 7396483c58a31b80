package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/data"
)

func writeText(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTextDataLoad(t *testing.T) {
	dir := t.TempDir()
	var jl strings.Builder
	for i := range 40 {
		jl.WriteString(`{"text": "message ` + strings.Repeat("x", i%7) + `", "author": "u` + string(rune('a'+i%10)) + `", "mood": ` + []string{"0", "1", "2"}[i%3] + "}\n")
	}
	path := writeText(t, dir, "msgs.jsonl", jl.String())

	// Next-token prediction, per user, 20% of the users held out.
	tf := textFlags{tokenizer: "bytes", context: 8, format: "auto", field: "text"}
	cf := csvFlags{user: "author", testFraction: 0.2}
	tr, te, source, err := tf.load(path, &cf)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Shape != (data.Shape{C: 8, H: 1, W: 1}) || tr.Classes != 257 || tr.Owners == nil || te == nil || te.Owners == nil {
		t.Fatalf("train %v classes %d owners %v, test %v", tr.Shape, tr.Classes, tr.Owners != nil, te)
	}
	if !strings.Contains(source, "next-token prediction") || !strings.Contains(source, "users") || !strings.Contains(source, "held out") {
		t.Errorf("source %q", source)
	}

	// Classification by a label field, classes given.
	cf = csvFlags{label: "mood"}
	tf.labels = "0,1,2"
	tr, te, source, err = tf.load(path, &cf)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Classes != 3 || te != nil || tr.Len() != 40 || !slices.Equal(tr.Y[:4], []int{0, 1, 2, 0}) {
		t.Errorf("classes %d test %v len %d labels %v", tr.Classes, te, tr.Len(), tr.Y[:4])
	}
	if !strings.Contains(source, "classification into 3 classes") {
		t.Errorf("source %q", source)
	}
}

func TestTextDataBadInput(t *testing.T) {
	dir := t.TempDir()
	good := writeText(t, dir, "good.jsonl", `{"text": "hello there"}`+"\n")
	bad := writeText(t, dir, "bad.jsonl", `{"text": "hello"}`+"\n"+`{"txt": 1}`+"\n")
	notok := filepath.Join(dir, "notok")
	os.Mkdir(notok, 0o755)
	writeText(t, notok, "vocab.json", `{"a": 0}`)
	writeText(t, notok, "merges.txt", "")
	// Flag errors, before anything is read.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-data", "text"}, "-data text needs -dir"},
		{[]string{"-data", "text", "-dir", good, "-model", "mlp"}, "-model mlp reads features, not token ids"},
		{[]string{"-data", "text", "-dir", good, "-model", "bert"}, `-model "bert": -data text trains -model gpt`},
		{[]string{"-data", "text", "-dir", good, "-context", "1"}, "-context 1: want 2 to 65536"},
		{[]string{"-data", "text", "-dir", good, "-text-format", "xml"}, `-text-format "xml"`},
		{[]string{"-data", "text", "-dir", good, "-labels", "a,b"}, "-labels names the classes of -label FIELD"},
		{[]string{"-data", "text", "-dir", good, "-categorical", "x"}, "-categorical only apply to -data csv"},
		{[]string{"-data", "fashion-mnist", "-context", "64"}, "-context only apply to -data text"},
		{[]string{"-data", "text", "-dir", good, "-test-fraction", "1"}, "-test-fraction 1: want a fraction in [0, 1)"},
	} {
		code, _, stderr := runCLI(t, append([]string{"run", "-steps", "1", "-non-private"}, c.args...)...)
		if code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
	// Errors of the files, as train run reports them (exit 2, one line).
	for _, c := range []struct {
		path string
		tf   textFlags
		cf   csvFlags
		want string
	}{
		{bad, textFlags{tokenizer: "bytes", context: 8}, csvFlags{}, `bad.jsonl: line 2: no "text" field`},
		{good, textFlags{tokenizer: notok, context: 8}, csvFlags{}, "-tokenizer:"},
		{filepath.Join(dir, "none.txt"), textFlags{tokenizer: "bytes", context: 8}, csvFlags{}, "no such file"},
		{good, textFlags{tokenizer: "bytes", context: 8}, csvFlags{label: "y"}, `no "y" field`},
		{good, textFlags{tokenizer: "bytes", context: 8}, csvFlags{testFraction: 0.5}, "-test-fraction 0.5: data: split text: 1 documents"},
	} {
		_, _, _, err := c.tf.load(c.path, &c.cf)
		err = asInputError(err)
		line := errorLine(err)
		var ue usageError
		if err == nil || !(errors.As(err, &ue) || errors.As(err, new(inputError))) || strings.Contains(line, "\n") || !strings.Contains(line, c.want) {
			t.Errorf("%s: %q; want a one-line input error with %q", c.path, line, c.want)
		}
	}
}

// TestTextRunSavePredictEval trains a tiny GPT on text (two steps), saves
// it, exports and imports it with adapters, fine-tunes it privately from
// the imported file, and reads it back with predict and eval: the
// commands of the README's text demonstration, on a toy corpus.
func TestTextRunSavePredictEval(t *testing.T) {
	dir := t.TempDir()
	corpus := writeText(t, dir, "corpus.txt", strings.Repeat("In the beginning God created the heaven and the earth.\n", 30))
	lm := filepath.Join(dir, "lm.dpmf")
	code, out, stderr := runCLI(t, "run", "-data", "text", "-dir", corpus, "-text-format", "lines", "-context", "16",
		"-gpt-dim", "8", "-gpt-heads", "2", "-gpt-blocks", "1", "-non-private", "-steps", "2", "-batch", "8",
		"-optimizer", "adam", "-test-fraction", "0.2", "-save-model", lm)
	if code != 0 || !strings.Contains(out, "test perplexity") {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, stderr)
	}
	hf := filepath.Join(dir, "hf")
	base := filepath.Join(dir, "base.dpmf")
	for _, args := range [][]string{
		{"export", "-model-file", lm, "-dir", hf},
		{"import", "-dir", hf, "-o", base, "-lora-rank", "2"},
	} {
		if code, out, stderr := runCLI(t, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, stderr)
		}
	}
	// The imported model scores the corpus as the trained one did.
	var ppl [2]string
	for i, m := range []string{lm, base} {
		code, out, stderr := runCLI(t, "eval", "-model-file", m, "-data", "text", "-dir", corpus, "-text-format", "lines", "-format", "json")
		if code != 0 || !strings.Contains(out, `"perplexity"`) {
			t.Fatalf("eval %s: exit %d\n%s\n%s", m, code, out, stderr)
		}
		ppl[i] = out
	}
	if ppl[0] != ppl[1] {
		t.Errorf("eval after export and import %s, before %s", ppl[1], ppl[0])
	}
	ft := filepath.Join(dir, "ft.dpmf")
	code, out, stderr = runCLI(t, "run", "-data", "text", "-dir", corpus, "-text-format", "lines", "-init-model", base,
		"-epsilon", "8", "-mechanism", "dpsgd", "-steps", "2", "-batch", "8", "-test-fraction", "0.2", "-save-model", ft)
	if code != 0 || !strings.Contains(out, "privacy: (epsilon 8") {
		t.Fatalf("private fine-tuning: exit %d\n%s\n%s", code, out, stderr)
	}
	prompts := writeText(t, dir, "p.jsonl", `{"text": "In the"}`+"\n"+`{"tokens": [73, 110]}`+"\n")
	code, out, stderr = runCLI(t, "predict", "-model-file", ft, "-input", prompts, "-tokenizer", "bytes", "-top", "2")
	if code != 0 || strings.Count(out, `{"top":[{"id":`) != 2 {
		t.Fatalf("predict: exit %d\n%s\n%s", code, out, stderr)
	}
	// -init-model refuses what would be ignored, and another context.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-init-model", base, "-gpt-dim", "16"}, "-init-model " + base + " is the model: -gpt-dim would be ignored"},
		{[]string{"-init-model", base, "-context", "8"}, "takes 16 token positions: give -context 16"},
		{[]string{"-init-model", corpus}, "-init-model:"},
		{[]string{"-model", "cnn"}, "-model cnn reads features"},
		{[]string{"-gpt-dim", "10", "-gpt-heads", "4"}, "-gpt-dim 10 is not a multiple of -gpt-heads 4"},
	} {
		args := append([]string{"run", "-data", "text", "-dir", corpus, "-text-format", "lines", "-non-private", "-steps", "1"}, c.args...)
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}
