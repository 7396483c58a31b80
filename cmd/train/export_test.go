package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// TestExportImportRoundTrip: train export then train import gives back
// the model file byte for byte (so every parameter bit), and train eval
// reports the same on both.
func TestExportImportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	m, err := models.NewMLP([3]int{1, 28, 28}, []int{16}, 10, nn.Tanh, 4)
	if err != nil {
		t.Fatal(err)
	}
	meta := models.Metadata{Dataset: "fashion-mnist/train", Classes: 10, Steps: 3, Batch: 100,
		Privacy: models.Privacy{Private: true, Epsilon: 3, Delta: 1e-5, Mechanism: "dpsgd", Accountant: "pld"}}
	orig, st, back := filepath.Join(dir, "m.dpmf"), filepath.Join(dir, "m.safetensors"), filepath.Join(dir, "back.dpmf")
	if err := models.WriteFile(orig, m, meta); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runCLI(t, "export", "-format", "safetensors", "-model-file", orig, "-o", st); code != 0 || !strings.Contains(out, "4 tensors, 12730 parameters as F32") {
		t.Fatalf("export: exit %d: %s%s", code, out, stderr)
	}
	if code, out, stderr := runCLI(t, "import", "-format", "safetensors", "-input", st, "-o", back); code != 0 || !strings.Contains(out, "(epsilon 3, delta 1e-05)-DP") {
		t.Fatalf("import: exit %d: %s%s", code, out, stderr)
	}
	a, _ := os.ReadFile(orig)
	b, _ := os.ReadFile(back)
	if !bytes.Equal(a, b) {
		t.Fatal("the imported model file differs from the exported one")
	}
	_, e1, _ := runCLI(t, "eval", "-model-file", orig, "-data", "embedded", "-format", "json")
	code, e2, stderr := runCLI(t, "eval", "-model-file", back, "-data", "embedded", "-format", "json")
	if code != 0 || e1 != e2 {
		t.Fatalf("eval: %q, after the round trip %q (exit %d: %s)", e1, e2, code, stderr)
	}
	// F16 imports too (rounded), and predicts.
	if code, _, stderr := runCLI(t, "export", "-model-file", orig, "-o", st, "-dtype", "f16"); code != 0 {
		t.Fatalf("export F16: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "import", "-input", st, "-o", back); code != 0 {
		t.Fatalf("import F16: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "eval", "-model-file", back, "-data", "embedded"); code != 0 {
		t.Fatalf("eval F16: exit %d: %s", code, stderr)
	}
}

// TestExportImportRefuses: bad input is one line and exit status 2.
func TestExportImportRefuses(t *testing.T) {
	dir := t.TempDir()
	m, err := models.NewLogistic([3]int{1, 2, 2}, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "m.dpmf")
	if err := models.WriteFile(model, m, models.Metadata{}); err != nil {
		t.Fatal(err)
	}
	st := filepath.Join(dir, "m.safetensors")
	if code, _, stderr := runCLI(t, "export", "-model-file", model, "-o", st); code != 0 {
		t.Fatalf("export: %s", stderr)
	}
	good, _ := os.ReadFile(st)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lies := append([]byte(nil), good...)
	lies[0], lies[5] = 0xff, 0x01 // header length beyond the file
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "-model-file", model}, "-o FILE is required"},
		{[]string{"export", "-model-file", model, "-o", st, "-dtype", "I64"}, `-dtype "I64"`},
		{[]string{"export", "-model-file", model, "-o", st, "-format", "onnx"}, `-format "onnx"`},
		{[]string{"export", "-model-file", st, "-o", st}, "model file"},
		{[]string{"import", "-input", st}, "-o MODEL are required"},
		{[]string{"import", "-input", write("trunc", good[:len(good)-3]), "-o", filepath.Join(dir, "x")}, "out of the buffer's bounds"},
		{[]string{"import", "-input", write("lies", lies), "-o", filepath.Join(dir, "x")}, "beyond the end of the file"},
		{[]string{"import", "-input", model, "-o", filepath.Join(dir, "x")}, "safetensors: header length"},
		{[]string{"import", "-input", filepath.Join(dir, "missing"), "-o", filepath.Join(dir, "x")}, "no such file"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("a refused import wrote its output")
	}
}

// TestImportGPT2Dir: train import -dir reads a Hugging Face GPT-2
// directory (with adapters), train export -dir writes it back (adapters
// merged), and a bad directory is one line, exit 2.
func TestImportGPT2Dir(t *testing.T) {
	dir := t.TempDir()
	m, hf := filepath.Join(dir, "g.dpmf"), filepath.Join(dir, "hf")
	src := filepath.Join("..", "..", "models", "testdata", "gpt2")
	if code, out, stderr := runCLI(t, "import", "-dir", src, "-o", m, "-context", "8", "-lora-rank", "2"); code != 0 || !strings.Contains(out, "non-private") {
		t.Fatalf("import: exit %d: %s%s", code, out, stderr)
	}
	tr, err := models.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, c, ok := models.TransformerOf(tr.Model); !ok || c.Context != 8 || c.LoRARank != 2 || !c.FreezeBase {
		t.Fatalf("imported %+v", c)
	}
	if code, out, stderr := runCLI(t, "export", "-model-file", m, "-dir", hf); code != 0 {
		t.Fatalf("export: exit %d: %s%s", code, out, stderr)
	}
	back, err := models.ReadGPT2Dir(hf, models.GPT2Options{})
	if err != nil {
		t.Fatal(err)
	}
	if back.Model.NumParams() >= tr.Model.NumParams() {
		t.Fatalf("merged export has %d parameters, the adapted model %d", back.Model.NumParams(), tr.Model.NumParams())
	}
	// predict: the next token after each input's last one, and its
	// log-probability, as PyTorch's logits of the fixture give them at
	// that position (the first input is the fixture's first 8 tokens).
	var fx struct{ Logits [][]float64 }
	if b, err := os.ReadFile(filepath.Join(src, "fixtures.json")); err != nil || json.Unmarshal(b, &fx) != nil {
		t.Fatalf("fixtures: %v", err)
	}
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(`{"tokens": [15,42,21,36,33,47,37,29]}`+"\n"+`{"tokens": [4,2]}`+"\n"), 0o644)
	code, out, stderr := runCLI(t, "predict", "-model-file", m, "-input", in, "-top", "1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("predict: exit %d: %q %s", code, out, stderr)
	}
	for i, c := range []struct{ fixture, pos int }{{0, 7}, {3, 1}} {
		row := fx.Logits[c.fixture][c.pos*50 : (c.pos+1)*50]
		best, z := 0, 0.0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
			z += math.Exp(v)
		}
		var got struct {
			Top []struct {
				ID      int
				Logprob float64
			}
		}
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil || len(got.Top) != 1 {
			t.Fatalf("predict line %q: %v", lines[i], err)
		}
		if want := row[best] - math.Log(z); got.Top[0].ID != best || math.Abs(got.Top[0].Logprob-want) > 1e-5 {
			t.Errorf("input %d: top %+v, PyTorch's is id %d with log-probability %v", i, got.Top[0], best, want)
		}
	}
	code, out, stderr = runCLI(t, "predict", "-model-file", m, "-input", in)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || strings.Count(lines[0], ",") != 49 {
		t.Fatalf("predict: exit %d: %q %s", code, out, stderr)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(src, "config.json"))
	st, _ := os.ReadFile(filepath.Join(src, "model.safetensors"))
	os.WriteFile(filepath.Join(bad, "config.json"), cfg, 0o644)
	os.WriteFile(filepath.Join(bad, "model.safetensors"), st[:len(st)/2], 0o644)
	code, out, stderr = runCLI(t, "import", "-dir", bad, "-o", filepath.Join(dir, "x.dpmf"))
	if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || out != "" {
		t.Fatalf("truncated weights: exit %d, %q %q", code, out, stderr)
	}
}
