package models

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/safetensors"
)

type gpt2Fixtures struct {
	Inputs      [][]int              `json:"inputs"`
	Logits      [][]float64          `json:"logits"`
	Loss        []float64            `json:"loss"`
	GradNorm    []float64            `json:"grad_norm"`
	TensorNorms []map[string]float64 `json:"tensor_norms"`
}

func readFixtures(t *testing.T) gpt2Fixtures {
	t.Helper()
	raw, err := os.ReadFile("testdata/gpt2/fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	var f gpt2Fixtures
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// gpt2Batch pads the fixture inputs to the model's context with -1.
func gpt2Batch(f gpt2Fixtures, ctx int) ([]float32, []int) {
	x := make([]float32, len(f.Inputs)*ctx)
	for i, ids := range f.Inputs {
		for k := range ctx {
			x[i*ctx+k] = -1
			if k < len(ids) {
				x[i*ctx+k] = float32(ids[k])
			}
		}
	}
	return x, make([]int, len(f.Inputs))
}

// TestGPT2MatchesPyTorch imports the directory the PyTorch script wrote
// and compares the logits (1e-5 relative to the example's largest), the
// losses and the per-example gradient norms, whole and per tensor (1e-4
// relative), with the fixtures PyTorch computed in float64.
func TestGPT2MatchesPyTorch(t *testing.T) {
	tr, err := ReadGPT2Dir("testdata/gpt2", GPT2Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := readFixtures(t)
	net, _, ok := TransformerOf(tr.Model)
	if !ok {
		t.Fatal("not a transformer")
	}
	plan, err := nn.NewSeqPlan(net, tr.Model.Params(), nn.Options{MaxBatch: len(f.Inputs), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	x, y := gpt2Batch(f, net.Context)
	logits := make([]float32, len(f.Inputs)*plan.Outputs())
	if err := plan.Forward(x, logits); err != nil {
		t.Fatal(err)
	}
	worstL, worstN := 0.0, 0.0
	for i, want := range f.Logits {
		got := logits[i*plan.Outputs():]
		scale := 0.0
		for _, v := range want {
			scale = max(scale, math.Abs(v))
		}
		for k, v := range want {
			worstL = max(worstL, math.Abs(float64(got[k])-v)/scale)
		}
	}
	if worstL > 1e-5 {
		t.Errorf("logits differ from PyTorch's by %.3g of the largest", worstL)
	}
	grads := make([][]float32, len(f.Inputs))
	for i := range grads {
		grads[i] = make([]float32, tr.Model.NumParams())
	}
	loss, err := plan.Gradients(x, y, grads)
	if err != nil {
		t.Fatal(err)
	}
	sq, _, err := plan.Norms(x, y)
	if err != nil {
		t.Fatal(err)
	}
	for i := range f.Inputs {
		if d := math.Abs(loss[i]-f.Loss[i]) / f.Loss[i]; d > 1e-5 {
			t.Errorf("example %d: loss %v, PyTorch %v", i, loss[i], f.Loss[i])
		}
		total := 0.0
		for _, v := range sq[i] {
			total += v
		}
		worstN = max(worstN, math.Abs(math.Sqrt(total)-f.GradNorm[i])/f.GradNorm[i])
		for _, p := range tr.Model.Layout() {
			name := ExportName(p.Name)
			want, ok := f.TensorNorms[i][name]
			if !ok {
				t.Fatalf("no fixture for %s", name)
			}
			s := 0.0
			for _, v := range grads[i][p.Offset : p.Offset+p.Len] {
				s += float64(v) * float64(v)
			}
			if d := math.Abs(math.Sqrt(s)-want) / want; d > 1e-4 {
				t.Errorf("example %d tensor %s: gradient norm %v, PyTorch %v", i, name, math.Sqrt(s), want)
			}
		}
	}
	if worstN > 1e-4 {
		t.Errorf("per-example gradient norms differ from PyTorch's by %.3g relative", worstN)
	}
	t.Logf("largest differences from PyTorch: logits %.2g (of the largest), per-example norms %.2g relative", worstL, worstN)
}

// TestGPT2RoundTrip writes the imported model back as a GPT-2 directory
// and reads it again: F32 keeps every bit, F16 and BF16 round.
func TestGPT2RoundTrip(t *testing.T) {
	tr, err := ReadGPT2Dir("testdata/gpt2", GPT2Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []safetensors.DType{safetensors.F32, safetensors.F16, safetensors.BF16} {
		dir := filepath.Join(t.TempDir(), "out")
		if err := WriteGPT2Dir(dir, tr.Model, dt); err != nil {
			t.Fatal(err)
		}
		back, err := ReadGPT2Dir(dir, GPT2Options{})
		if err != nil {
			t.Fatal(err)
		}
		a, b := tr.Model.Params(), back.Model.Params()
		for k := range a {
			ok := a[k] == b[k]
			if dt != safetensors.F32 {
				ok = math.Abs(float64(a[k]-b[k])) <= 1.0/128*math.Abs(float64(a[k]))
			}
			if !ok {
				t.Fatalf("%v: parameter %d: %v, back %v", dt, k, a[k], b[k])
			}
		}
	}
}

// TestLoRAMerge checks that an adapted model and its merged export give
// the same logits, and that fresh adapters leave the base's logits.
func TestLoRAMerge(t *testing.T) {
	base, err := ReadGPT2Dir("testdata/gpt2", GPT2Options{Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	ad, err := ReadGPT2Dir("testdata/gpt2", GPT2Options{Context: 8, LoRARank: 2, LoRAAlpha: 4, LoRATargets: []string{"attn.c_attn", "mlp.c_proj"}, FreezeBase: true, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []GPT2Options{
		{LoRARank: 2, LoRAAlpha: 4, LoRATargets: []string{"attn.q"}},
		{LoRARank: 2, LoRAAlpha: -1},
		{LoRATargets: []string{"attn.c_attn"}},
		{Context: 17},
	} {
		if _, err := ReadGPT2Dir("testdata/gpt2", o); err == nil || !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	x := []float32{1, 5, 7, 9, 11, 2, 3, -1}
	out := func(m Model) []float32 {
		net, _, _ := TransformerOf(m)
		p, err := nn.NewSeqPlan(net, m.Params(), nn.Options{MaxBatch: 1, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		l := make([]float32, p.Outputs())
		if err := p.Forward(x, l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	b0, a0 := out(base.Model), out(ad.Model)
	for k := range b0 {
		if b0[k] != a0[k] {
			t.Fatalf("fresh adapters change logit %d: %v vs %v", k, a0[k], b0[k])
		}
	}
	// Train-like adapters: B nonzero.
	for _, p := range ad.Model.Layout() {
		if strings.HasSuffix(p.Name, "/lora_B") {
			for j := range p.Len {
				ad.Model.Params()[p.Offset+j] = float32(math.Sin(float64(j))) * 0.1
			}
		}
	}
	merged, err := MergeLoRA(ad.Model)
	if err != nil {
		t.Fatal(err)
	}
	if merged.NumParams() != base.Model.NumParams() {
		t.Fatalf("merged model has %d parameters, base %d", merged.NumParams(), base.Model.NumParams())
	}
	a1, m1 := out(ad.Model), out(merged)
	diff := false
	for k := range a1 {
		diff = diff || a1[k] != b0[k]
		if math.Abs(float64(a1[k]-m1[k])) > 1e-5*(1+math.Abs(float64(a1[k]))) {
			t.Fatalf("logit %d: adapted %v, merged %v", k, a1[k], m1[k])
		}
	}
	if !diff {
		t.Fatal("the adapters changed nothing")
	}
	// The model file round-trips the adapted model.
	path := filepath.Join(t.TempDir(), "m.dpmf")
	if err := WriteFile(path, ad.Model, ad.Metadata); err != nil {
		t.Fatal(err)
	}
	back, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, c, ok := TransformerOf(back.Model); !ok || c.LoRARank != 2 || !c.FreezeBase {
		t.Fatalf("model file lost the adapters: %+v", c)
	}
}

// writeGPT2Case writes a GPT-2 directory of the config and the tensors
// (or the raw weights file).
func writeGPT2Case(t *testing.T, cfg map[string]any, tensors []safetensors.Tensor, raw []byte) string {
	t.Helper()
	dir := t.TempDir()
	cj, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	if raw == nil {
		var b strings.Builder
		if err := safetensors.Write(&b, tensors, nil); err != nil {
			t.Fatal(err)
		}
		raw = []byte(b.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGPT2BadFiles checks that bad directories are refused with one line
// wrapping ErrInvalid or safetensors.ErrFormat.
func TestGPT2BadFiles(t *testing.T) {
	good, err := os.ReadFile("testdata/gpt2/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	raw, _ := os.ReadFile("testdata/gpt2/config.json")
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	with := func(k string, v any) map[string]any {
		c := map[string]any{}
		for a, b := range cfg {
			c[a] = b
		}
		c[k] = v
		return c
	}
	tr, err := ReadGPT2Dir("testdata/gpt2", GPT2Options{})
	if err != nil {
		t.Fatal(err)
	}
	tensors := func(edit func(ts []safetensors.Tensor) []safetensors.Tensor) []safetensors.Tensor {
		var ts []safetensors.Tensor
		for _, p := range tr.Model.Layout() {
			ts = append(ts, safetensors.Tensor{Name: ExportName(p.Name), Shape: p.Shape, DType: safetensors.F32, Data: tr.Model.Params()[p.Offset : p.Offset+p.Len]})
		}
		return edit(ts)
	}
	header := good[8 : 8+int(good[0])+int(good[1])<<8]
	lie := append([]byte(nil), good...)
	copy(lie[8:], strings.Replace(string(header), `"data_offsets":[0,`, `"data_offsets":[8,`, 1))
	cases := []struct {
		name string
		dir  string
		want string
	}{
		{"truncated", writeGPT2Case(t, cfg, nil, good[:len(good)-100]), ""},
		{"short header", writeGPT2Case(t, cfg, nil, good[:20]), ""},
		{"offsets lie", writeGPT2Case(t, cfg, nil, lie), ""},
		{"model type", writeGPT2Case(t, with("model_type", "bert"), nil, good), "model_type"},
		{"wrong size", writeGPT2Case(t, with("n_embd", 64), nil, good), "config.json describes"},
		{"huge config", writeGPT2Case(t, with("vocab_size", 1<<23), nil, good), "config.json"},
		{"blocks", writeGPT2Case(t, with("n_layer", 1<<24), nil, good), "blocks"},
		{"layers", writeGPT2Case(t, with("n_layer", 100), nil, good), "100 layers"},
		{"heads", writeGPT2Case(t, with("n_head", 5), nil, good), "heads"},
		{"activation", writeGPT2Case(t, with("activation_function", "relu"), nil, good), "activation"},
		{"missing tensor", writeGPT2Case(t, cfg, tensors(func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts[1:], safetensors.Tensor{Name: "h.0.attn.bias", Shape: []int{1}, DType: safetensors.F32, Data: []float32{1}})
		}), nil), "lacks tensor"},
		{"extra tensor", writeGPT2Case(t, cfg, tensors(func(ts []safetensors.Tensor) []safetensors.Tensor {
			return append(ts, safetensors.Tensor{Name: "h.7.ln_1.weight", Shape: []int{32}, DType: safetensors.F32, Data: make([]float32, 32)})
		}), nil), "not a GPT-2 parameter"},
		{"wrong shape", writeGPT2Case(t, cfg, tensors(func(ts []safetensors.Tensor) []safetensors.Tensor {
			ts[3].Shape = []int{1, 32}
			return ts
		}), nil), "shape"},
		{"nan", writeGPT2Case(t, cfg, tensors(func(ts []safetensors.Tensor) []safetensors.Tensor {
			d := append([]float32(nil), ts[5].Data...)
			d[0] = float32(math.NaN())
			ts[5].Data = d
			return ts
		}), nil), "NaN"},
		{"no dir", filepath.Join(t.TempDir(), "none"), "config.json"},
	}
	for _, c := range cases {
		_, err := ReadGPT2Dir(c.dir, GPT2Options{})
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q", c.name, err)
		}
		if !errors.Is(err, dpcore.ErrInvalid) && !errors.Is(err, safetensors.ErrFormat) {
			t.Errorf("%s: %v wraps neither ErrInvalid nor ErrFormat", c.name, err)
		}
	}
}

// FuzzReadGPT2Dir feeds arbitrary bytes as model.safetensors of the
// fixture's config: an error or a model, never a panic.
func FuzzReadGPT2Dir(f *testing.F) {
	good, err := os.ReadFile("testdata/gpt2/model.safetensors")
	if err != nil {
		f.Fatal(err)
	}
	cfg, err := os.ReadFile("testdata/gpt2/config.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:200])
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, _ = ReadGPT2Dir(dir, GPT2Options{})
	})
}

// TestTransformerSafetensorsRoundTrip: a transformer with adapters and a
// classification head goes through WriteSafetensors and ReadSafetensors
// bit for bit.
func TestTransformerSafetensorsRoundTrip(t *testing.T) {
	m, err := NewTransformer("cls", TransformerConfig{Vocab: 30, Context: 6, Dim: 8, Heads: 2, Blocks: 1, Causal: true,
		Classes: 3, LoRARank: 2, LoRAAlpha: 4, LoRATargets: []string{"mlp.c_fc"}, FreezeBase: true, Positions: nn.SinusoidalPositions}, 5)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteSafetensors(&b, m, Metadata{Dataset: "x"}, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	sf, err := safetensors.Open(strings.NewReader(b.String()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := sf.Lookup("score.weight"); !ok || st.Shape[0] != 3 || st.Shape[1] != 8 {
		t.Fatalf("score.weight %v, want nn.Linear's [3 8]", st.Shape)
	}
	back, err := ReadSafetensors(strings.NewReader(b.String()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range m.Params() {
		if back.Model.Params()[k] != v {
			t.Fatalf("parameter %d: %v, back %v", k, v, back.Model.Params()[k])
		}
	}
	if _, c, ok := TransformerOf(back.Model); !ok || c.Positions != nn.SinusoidalPositions || c.Classes != 3 || c.LoRATargets[0] != "mlp.c_fc" {
		t.Fatalf("configuration %+v", c)
	}
	lm, err := NewTransformer("lm", TransformerConfig{Vocab: 30, Context: 6, Dim: 8, Heads: 2, Blocks: 1, Untied: true, PostNorm: true}, 6)
	if err != nil {
		t.Fatal(err)
	}
	var lb strings.Builder
	if err := WriteSafetensors(&lb, lm, Metadata{}, safetensors.F32); err != nil {
		t.Fatal(err)
	}
	lback, err := ReadSafetensors(strings.NewReader(lb.String()), int64(lb.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range lm.Params() {
		if lback.Model.Params()[k] != v {
			t.Fatalf("untied post-norm model: parameter %d: %v, back %v", k, v, lback.Model.Params()[k])
		}
	}
	path := filepath.Join(t.TempDir(), "cls.dpmf")
	if err := WriteFile(path, m, Metadata{Dataset: "x"}); err != nil {
		t.Fatal(err)
	}
	file, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, c, ok := TransformerOf(file.Model); !ok || c.Positions != nn.SinusoidalPositions || c.Classes != 3 {
		t.Fatalf("model file configuration %+v", c)
	}
	if err := WriteGPT2Dir(t.TempDir(), m, safetensors.F32); err == nil {
		t.Fatal("a classifier with sinusoidal positions written as GPT-2")
	}
}

// TestPredictTransformer: Predict on an imported GPT-2 gives the
// next-token distribution of PyTorch's logits at each example's last
// token; bad ids are one line.
func TestPredictTransformer(t *testing.T) {
	tr, err := ReadGPT2Dir("testdata/gpt2", GPT2Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := readFixtures(t)
	x, _ := gpt2Batch(f, 16)
	classes, probs, err := tr.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	V := 50
	for i, ids := range f.Inputs {
		want := f.Logits[i][(len(ids)-1)*V : len(ids)*V]
		mx, arg := math.Inf(-1), 0
		for j, v := range want {
			if v > mx {
				mx, arg = v, j
			}
		}
		s := 0.0
		for _, v := range want {
			s += math.Exp(v - mx)
		}
		if classes[i] != arg {
			t.Errorf("example %d: next token %d, PyTorch %d", i, classes[i], arg)
		}
		for j, v := range want {
			if p := math.Exp(v-mx) / s; math.Abs(float64(probs[i*V+j])-p) > 1e-6 {
				t.Fatalf("example %d token %d: probability %v, PyTorch %v", i, j, probs[i*V+j], p)
			}
		}
	}
	x[3] = 50
	if _, _, err := tr.Predict(x); err == nil || strings.Contains(err.Error(), "\n") {
		t.Fatalf("id 50 of a 50-token vocabulary: %v", err)
	}
}

// FuzzGPT2Config feeds arbitrary bytes as config.json next to the
// fixture's weights: an error or a model, never a panic or a huge
// allocation.
func FuzzGPT2Config(f *testing.F) {
	good, err := os.ReadFile("testdata/gpt2/model.safetensors")
	if err != nil {
		f.Fatal(err)
	}
	cfg, err := os.ReadFile("testdata/gpt2/config.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cfg)
	f.Add([]byte(`{"model_type":"gpt2","vocab_size":50,"n_positions":16,"n_embd":32,"n_layer":2,"n_head":4,"n_inner":64}`))
	f.Add([]byte(`{"model_type":"gpt2","vocab_size":16777216,"n_positions":16777216,"n_embd":16777216,"n_layer":65536,"n_head":1}`))
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), good, 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, _ = ReadGPT2Dir(dir, GPT2Options{})
	})
}
