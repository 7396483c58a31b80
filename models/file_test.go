package models

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os/exec"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/vmihailenco/msgpack/v5"
)

func fileTestModels(t testing.TB) []Model {
	t.Helper()
	mk := []func() (Model, error){
		func() (Model, error) { return NewLogistic([3]int{1, 4, 4}, 3, 1) },
		func() (Model, error) { return NewMLP([3]int{2, 3, 3}, []int{7, 5}, 4, nn.Tanh, 2) },
		func() (Model, error) { return NewMLP([3]int{1, 4, 4}, []int{6}, 3, nn.ReLU, 3) },
		func() (Model, error) { return NewCIFARCNN([3]int{3, 10, 10}, 5, 4) },
		// Builder-made models: WRN-16-4 on small images, the tabular
		// classifier, and users' own stacks.
		func() (Model, error) { return NewWRN16x4([3]int{3, 8, 8}, 10, 4, 5) },
		func() (Model, error) { return NewTabular(2, []int{4, 3}, 3, []int{8}, 3, 6) },
		func() (Model, error) { return customResidual(7) },
		func() (Model, error) { return customBag(8) },
	}
	var out []Model
	for i, f := range mk {
		m, err := f()
		if err != nil {
			t.Fatal(err)
		}
		// Random biases (and logistic weights) so that every parameter
		// matters to the predictions.
		rng := rand.New(rand.NewPCG(uint64(i), 9))
		for j := range m.Params() {
			m.Params()[j] += float32(0.1 * rng.NormFloat64())
		}
		out = append(out, m)
	}
	return out
}

// customResidual is a user's own image model with every kind of layer
// that takes images: convolutions with stride and padding, nested residual
// blocks with GroupNorm and LayerNorm, dropout, both poolings, GELU.
func customResidual(seed uint64) (Model, error) {
	b := NewBuilder("my-resnet", [3]int{2, 9, 9}, seed)
	b.Conv2D("stem", 4, 3, 1, 1, nn.GELU).MaxPool(1)
	b.Residual(func(r *Builder) {
		r.GroupNormAct("n1", 2, nn.ReLU).Conv2D("c1", 8, 3, 2, 1, nn.Tanh).Dropout(0.25).
			Residual(func(r2 *Builder) { r2.LayerNorm("inner.norm").Conv2D("inner.conv", 8, 1, 1, 0, nn.Identity) }, nil)
	}, func(s *Builder) { s.Conv2D("proj", 8, 1, 2, 0, nn.Identity) })
	b.AvgPool(2).Flatten().Dropout(0.5).Dense("", 6, nn.ReLU)
	b.Residual(func(r *Builder) { r.Dense("fc.inner", 6, nn.GELU) }, nil)
	return b.Dense("out", 3, nn.Identity).Model()
}

// customBag embeds a variable-length list of ids (mean of one shared
// table) next to one numeric column.
func customBag(seed uint64) (Model, error) {
	b := NewBuilder("my-bag", [3]int{5, 1, 1}, seed)
	b.Embedding("ids", 1, []int{6}, []int{4}, nn.MeanBag).LayerNorm("").Dense("hidden", 8, nn.ReLU)
	return b.Dropout(0.1).Dense("", 2, nn.Identity).Model()
}

var testMeta = Metadata{Dataset: "synthetic/train", Classes: 5, Steps: 20, Privacy: Privacy{
	Private: true, Epsilon: 8, Delta: 1e-5, Mechanism: "bandmf:4", Accountant: "pld",
	Assumptions: []string{"adjacency: add/remove of one example"}, Notes: []string{"noise seeded by the caller"}}}

// randInputs returns n examples for m: normal features, and ids in
// [-1, vocabulary) (-1 absent) in an embedding's id columns.
func randInputs(m Model, n int, seed uint64) []float32 {
	in := m.InputShape()
	per := in[0] * in[1] * in[2]
	x := make([]float32, n*per)
	rng := rand.New(rand.NewPCG(seed, 1))
	e, emb := m.Network().Layers[0].(nn.Embedding)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		if c := i % per; emb && c >= e.Numeric {
			vocab := e.Tables[0].Vocab
			if len(e.Tables) > 1 {
				vocab = e.Tables[c-e.Numeric].Vocab
			}
			x[i] = float32(rng.IntN(vocab+1) - 1)
		}
	}
	return x
}

// TestSaveLoadBitIdentical: a saved model reloads with the same
// architecture, metadata and parameter bits, saves again to the same
// bytes, and predicts exactly what the executor computes from the
// original parameters.
func TestSaveLoadBitIdentical(t *testing.T) {
	for _, m := range fileTestModels(t) {
		var b bytes.Buffer
		if err := Save(&b, m, testMeta); err != nil {
			t.Fatal(err)
		}
		tr, err := Load(bytes.NewReader(b.Bytes()))
		if err != nil {
			t.Fatalf("%s: %v", m.Name(), err)
		}
		if !reflect.DeepEqual(tr.Architecture, m.(Architected).Architecture()) || !reflect.DeepEqual(tr.Metadata, testMeta) {
			t.Fatalf("%s: read back %+v %+v", m.Name(), tr.Architecture, tr.Metadata)
		}
		if tr.Model.Name() != m.Name() || !reflect.DeepEqual(tr.Model.Layout(), m.Layout()) {
			t.Fatalf("%s: rebuilt as %s %v", m.Name(), tr.Model.Name(), tr.Model.Layout())
		}
		for i, v := range m.Params() {
			if math.Float32bits(tr.Model.Params()[i]) != math.Float32bits(v) {
				t.Fatalf("%s: parameter %d: %v, saved %v", m.Name(), i, tr.Model.Params()[i], v)
			}
		}
		var again bytes.Buffer
		if err := Save(&again, tr.Model, tr.Metadata); err != nil || !bytes.Equal(again.Bytes(), b.Bytes()) {
			t.Fatalf("%s: re-saved file differs (%v)", m.Name(), err)
		}

		const n = 37 // more than two executor chunks, not a multiple
		x := randInputs(m, n, 7)
		cls, probs, err := tr.Predict(x)
		if err != nil {
			t.Fatal(err)
		}
		// The original model predicts the same bits.
		orig := &Trained{Model: m, Architecture: m.(Architected).Architecture()}
		ocls, oprobs, err := orig.Predict(x)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range oprobs {
			if math.Float32bits(p) != math.Float32bits(probs[i]) || ocls[i/m.Classes()] != cls[i/m.Classes()] {
				t.Fatalf("%s: output %d: reloaded %v (class %d), original %v (class %d)", m.Name(), i, probs[i], cls[i/m.Classes()], p, ocls[i/m.Classes()])
			}
		}
		plan, err := nn.NewPlan(m.Network(), m.Params(), nn.Options{MaxBatch: n})
		if err != nil {
			t.Fatal(err)
		}
		k := m.Classes()
		logits := make([]float32, n*k)
		if err := plan.Forward(x, logits); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			row, lg := probs[i*k:(i+1)*k], logits[i*k:(i+1)*k]
			sum, best := 0.0, 0
			for j := range k {
				if lg[j] > lg[best] {
					best = j
				}
				// Exact softmax in float64 from the original model's logits.
				den := 0.0
				for _, v := range lg {
					den += math.Exp(float64(v) - float64(lg[j]))
				}
				if want := float32(1 / den); math.Abs(float64(row[j]-want)) > 1e-6 {
					t.Fatalf("%s: example %d class %d: probability %v, want %v", m.Name(), i, j, row[j], want)
				}
				if !(row[j] >= 0 && row[j] <= 1) {
					t.Fatalf("%s: probability %v", m.Name(), row[j])
				}
				sum += float64(row[j])
			}
			if math.Abs(sum-1) > 1e-6*float64(k) {
				t.Fatalf("%s: example %d: probabilities sum to %v", m.Name(), i, sum)
			}
			if cls[i] != best {
				t.Fatalf("%s: example %d: class %d, argmax of the logits %d", m.Name(), i, cls[i], best)
			}
		}
		// Predictions depend on how the batch is split only through the
		// GEMM's summation order (a single row takes another kernel):
		// within a few float32 roundings.
		_, one, err := tr.Predict(x[len(x)/n*(n-1):])
		if err != nil {
			t.Fatal(err)
		}
		for j := range k {
			if math.Abs(float64(one[j]-probs[(n-1)*k+j])) > 1e-6 {
				t.Fatalf("%s: last example alone: %v, in the batch %v", m.Name(), one, probs[(n-1)*k:])
			}
		}
	}
}

func TestPredictRefuses(t *testing.T) {
	m := fileTestModels(t)[1]
	var b bytes.Buffer
	if err := Save(&b, m, Metadata{}); err != nil {
		t.Fatal(err)
	}
	tr, err := Load(&b)
	if err != nil {
		t.Fatal(err)
	}
	x := randInputs(m, 2, 1)
	x[20] = float32(math.NaN())
	for _, c := range []struct {
		x    []float32
		want string
	}{
		{nil, "0 floats is not a positive multiple of one example's 18 (2x3x3)"},
		{x[:17], "17 floats"},
		{x, "example 1, feature 2 is NaN"},
	} {
		if _, _, err := tr.Predict(c.x); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Predict(%d floats): %v, want %q", len(c.x), err, c.want)
		}
	}
}

func TestSaveRefuses(t *testing.T) {
	m := fileTestModels(t)[0]
	m.Params()[3] = float32(math.Inf(1))
	var b bytes.Buffer
	if err := Save(&b, m, Metadata{}); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "parameter 3 is +Inf") {
		t.Fatalf("Save with an infinite parameter: %v", err)
	}
	if err := Save(&b, nil, Metadata{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("Save(nil): %v", err)
	}
}

// sealPayload builds a model file around an arbitrary payload, with a
// valid checksum, to test what Load does after the envelope checks.
func sealPayload(t *testing.T, p any, version int) []byte {
	t.Helper()
	raw, err := msgpack.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := atomicfile.Seal(fileMagic, version, raw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkCorrupt(t *testing.T, what string, blob []byte, want string) {
	t.Helper()
	_, err := Load(bytes.NewReader(blob))
	if err == nil {
		t.Fatalf("%s: accepted", what)
	}
	msg := err.Error()
	if !errors.Is(err, ErrCorruptFile) || strings.Contains(msg, "\n") || strings.Count(msg, "models:") != 1 || !strings.Contains(msg, want) {
		t.Fatalf("%s: error %q, want one line wrapping ErrCorruptFile with %q", what, msg, want)
	}
}

// TestLoadRefuses: corrupt, truncated, wrong-version and inconsistent
// files are refused with one-line errors.
func TestLoadRefuses(t *testing.T) {
	m := fileTestModels(t)[1]
	var b bytes.Buffer
	if err := Save(&b, m, testMeta); err != nil {
		t.Fatal(err)
	}
	blob := b.Bytes()
	for n := 0; n < len(blob); n += 1 + n/8 {
		checkCorrupt(t, "truncated", blob[:n], "")
	}
	for _, i := range []int{0, 5, len(blob) / 3, len(blob) / 2, len(blob) - 1} {
		bad := bytes.Clone(blob)
		bad[i] ^= 0x10
		checkCorrupt(t, "flipped byte", bad, "")
	}
	good := filePayload{Arch: m.(Architected).Architecture(), Meta: testMeta}
	good.Params = make([]byte, 4*m.NumParams())
	checkCorrupt(t, "version 3", sealPayload(t, &good, 3), "format version 3, this build reads version 2")

	fz, _ := atomicfile.Seal("dpmf-factorization", 1, []byte{0x80})
	checkCorrupt(t, "other kind", fz, `not a dpmf-model file (kind "dpmf-factorization")`)
	checkCorrupt(t, "not msgpack", []byte("hello, world"), "not a dpmf-model file")

	short := good
	short.Params = good.Params[:len(good.Params)-4]
	checkCorrupt(t, "missing parameter", sealPayload(t, &short, fileVersion), "brings the model to 197 parameters (7.34e-07 GiB as float32), over the limit of 196")

	nan := good
	nan.Params = bytes.Clone(good.Params)
	copy(nan.Params[8:], []byte{0, 0, 0xc0, 0x7f})
	checkCorrupt(t, "NaN parameter", sealPayload(t, &nan, fileVersion), "parameter 2 is NaN")

	// Edits of the layer description, on its msgpack form.
	edit := func(what string, f func(arch map[string]any), want string) {
		t.Helper()
		raw, err := msgpack.Marshal(&good)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		if err := msgpack.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		f(p["arch"].(map[string]any))
		checkCorrupt(t, what, sealPayload(t, p, fileVersion), want)
	}
	layer := func(a map[string]any, i int) map[string]any { return a["layers"].([]any)[i].(map[string]any) }
	edit("unknown layer kind", func(a map[string]any) { layer(a, 1)["kind"] = "attention" }, `layer kind "attention" is not known to this build`)
	edit("unknown activation", func(a map[string]any) { layer(a, 1)["act"] = "swish" }, `activation "swish" (want identity, tanh, relu, gelu, sigmoid or leakyrelu)`)
	edit("huge layer", func(a map[string]any) { layer(a, 1)["out"] = 1 << 24 }, "brings the model to 3.0199e+08 parameters")
	edit("absurd layer", func(a map[string]any) { layer(a, 1)["out"] = 1 << 40 }, `layer 1 (dense "dense0"): hyper-parameter 1099511627776 out of range`)
	edit("bad input shape", func(a map[string]any) { a["input"] = []int{0, 3, 3} }, "input shape [0 3 3]")
	edit("huge input", func(a map[string]any) { a["input"] = []int{1 << 20, 1 << 20, 1} }, "input shape [1048576 1048576 1] has more than 67108864 features")
	edit("renamed parameter", func(a map[string]any) { a["params"].([]any)[0].(map[string]any)["name"] = "w" },
		"parameter tensor 0 is dense0/w [18 7], the architecture lists w [18 7]")
	edit("reshaped parameter", func(a map[string]any) { a["params"].([]any)[1].(map[string]any)["shape"] = []int{1, 7} },
		"parameter tensor 1 is dense0/b [7], the architecture lists dense0/b [1 7]")
	edit("missing parameter tensor", func(a map[string]any) { a["params"] = a["params"].([]any)[:5] },
		"the layers make 6 parameter tensors, the architecture lists 5")
	edit("other classes", func(a map[string]any) { a["classes"] = 3 }, "the layers end in 4 logits, the architecture says 3 classes")
	edit("bad shapes", func(a map[string]any) { layer(a, 0)["kind"] = "maxpool"; layer(a, 0)["size"] = 4 }, "layer maxpool0 on a 2x3x3 input: max pool 4")
	edit("empty residual", func(a map[string]any) {
		a["layers"] = append([]any{map[string]any{"kind": "residual"}}, a["layers"].([]any)...)
	},
		"residual block with an empty body")
	deep := map[string]any{"kind": "flatten"}
	for range 70 {
		deep = map[string]any{"kind": "residual", "body": []any{deep}}
	}
	edit("deep nesting", func(a map[string]any) { a["layers"] = append([]any{deep}, a["layers"].([]any)...) }, "residual blocks nested more than 64 deep")

	// Version 1 files named a constructor.
	v1 := payloadV1{Arch: archV1{Name: "mlp", Input: [3]int{2, 3, 3}, Classes: 4, Hidden: []int{7, 5}, Activation: "tanh"}, Params: good.Params}
	unknown := v1
	unknown.Arch.Name = "resnet"
	checkCorrupt(t, "unknown v1 architecture", sealPayload(t, &unknown, 1), `version 1 architecture "resnet" is not known to this build (want logistic, mlp or cifarcnn); retrain`)
	huge := v1
	huge.Arch.Hidden = []int{1 << 30, 1 << 30}
	checkCorrupt(t, "huge v1 architecture", sealPayload(t, &huge, 1), "197 parameters for a mlp that has 1152921530376650752")
	cnn := payloadV1{Arch: archV1{Name: "cifarcnn", Input: [3]int{1, 4, 4}, Classes: 2}}
	n, _ := cnn.Arch.numParams()
	cnn.Params = make([]byte, 4*int(n))
	checkCorrupt(t, "cnn on 4x4", sealPayload(t, &cnn, 1), "too small for three 2x2 pools")
}

// TestLoadVersion1: a file written by the previous format version (an MLP
// saved by the build before layer descriptions, testdata/v1-mlp.dpmf)
// loads with its parameters bit for bit and saves again as version 2.
func TestLoadVersion1(t *testing.T) {
	tr, err := ReadFile("testdata/v1-mlp.dpmf")
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMLP([3]int{1, 2, 2}, []int{3}, 2, nn.Tanh, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Params() {
		m.Params()[i] += 0.01 * float32(i)
	}
	if !reflect.DeepEqual(tr.Model.Params(), m.Params()) || !reflect.DeepEqual(tr.Metadata, testMeta) {
		t.Fatalf("version 1 file: params %v meta %+v, want %v %+v", tr.Model.Params(), tr.Metadata, m.Params(), testMeta)
	}
	if !reflect.DeepEqual(tr.Architecture, m.(Architected).Architecture()) {
		t.Fatalf("architecture %+v", tr.Architecture)
	}
	var b bytes.Buffer
	if err := Save(&b, tr.Model, tr.Metadata); err != nil {
		t.Fatal(err)
	}
	if _, err := atomicfile.Open(b.Bytes(), fileMagic, 2); err != nil {
		t.Fatalf("re-saved: %v", err)
	}
}

// FuzzLoadModel: Load never panics; whatever it accepts saves back to a
// file that loads to the same model, and predicts probabilities that sum
// to 1. The seed corpus (testdata/fuzz/FuzzLoadModel) runs with plain go
// test.
func FuzzLoadModel(f *testing.F) {
	for _, m := range slices.Concat(fileTestModels(f)[:3], fileTestModels(f)[5:]) {
		var b bytes.Buffer
		if err := Save(&b, m, testMeta); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, blob []byte) {
		tr, err := Load(bytes.NewReader(blob))
		if err != nil {
			if !errors.Is(err, ErrCorruptFile) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q", err)
			}
			return
		}
		var b bytes.Buffer
		if err := Save(&b, tr.Model, tr.Metadata); err != nil {
			t.Fatal(err)
		}
		tr2, err := Load(&b)
		if err != nil || !reflect.DeepEqual(tr2.Model.Params(), tr.Model.Params()) {
			t.Fatalf("reload: %v", err)
		}
		in := tr.Architecture.Input
		if in[0]*in[1]*in[2] > 1<<12 {
			return
		}
		_, probs, err := tr.Predict(make([]float32, in[0]*in[1]*in[2]))
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, p := range probs {
			sum += float64(p)
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Fatalf("probabilities sum to %v", sum)
		}
	})
}

// TestNoTrainingDependencies: inference links nothing of the training
// stack.
func TestNoTrainingDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"train", "clip", "mfnoise", "accountant", "sampler", "optim", "privacy"} {
			if dep == "github.com/dpmf-go/dpmf/"+bad {
				t.Errorf("models depends on %s", dep)
			}
		}
	}
}

// A model file whose checksum is right but whose payload declares a 4 GiB
// parameter string (a forged or buggy writer; SHA-256 is not a signature)
// is refused as corrupt without allocating what it declares. Before the
// lengths were checked, Load allocated the 4 GiB first.
func TestLoadRefusesDeclaredLengthBeyondTheFile(t *testing.T) {
	// {"params": bin32 of 2^32-1 bytes} followed by 8 bytes.
	payload := []byte{0x81, 0xa6, 'p', 'a', 'r', 'a', 'm', 's', 0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8}
	blob, err := atomicfile.Seal(fileMagic, fileVersion, payload)
	if err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err = Load(bytes.NewReader(blob))
	runtime.ReadMemStats(&m1)
	if !errors.Is(err, ErrCorruptFile) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %v, want one line wrapping ErrCorruptFile", err)
	}
	if n := m1.TotalAlloc - m0.TotalAlloc; n > 1<<20 {
		t.Fatalf("allocated %d bytes to refuse a %d-byte file", n, len(blob))
	}
	t.Log(err)
}
