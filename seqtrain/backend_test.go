package seqtrain_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/seqtrain"
	"github.com/dpmf-go/dpmf/text"
	"github.com/dpmf-go/dpmf/train"
)

func tinyGPT(t *testing.T, lora bool) models.Model {
	t.Helper()
	c := models.TransformerConfig{Vocab: 257, Context: 8, Dim: 16, Heads: 2, Blocks: 1, Causal: true}
	if lora {
		c.LoRARank, c.LoRAAlpha, c.FreezeBase = 2, 4, true
	}
	m, err := models.NewTransformer("tiny-gpt", c, 1)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func corpus(t *testing.T, context int) *data.Dataset {
	t.Helper()
	docs := []data.TextDocument{{Text: strings.Repeat("abcabcabd ", 20)}}
	d, err := data.NewTextDataset(docs, text.Bytes{}, data.TextDataOptions{Context: context})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestClippedSum checks the engine's clipped sum against each example's
// gradient (SeqPlan.Gradients) clipped to the norm by hand and summed,
// restricted to the trainable parameters (the LoRA adapters).
func TestClippedSum(t *testing.T) {
	m := tinyGPT(t, true)
	b, err := seqtrain.NewBackend(m)
	if err != nil {
		t.Fatal(err)
	}
	const norm = 0.05
	eng, err := b.NewEngine(clip.Options{Norm: norm, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	d := corpus(t, 8)
	x, y := d.X[:4*8], d.Y[:4]
	dst := make([]float32, len(eng.Params()))
	st, err := eng.ClippedSumContext(context.Background(), x, y, dst)
	if err != nil {
		t.Fatal(err)
	}
	net, _, _ := models.TransformerOf(m)
	plan, err := nn.NewSeqPlan(net, m.Params(), nn.Options{MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	grads := make([][]float32, 4)
	for i := range grads {
		grads[i] = make([]float32, m.NumParams())
	}
	if _, err := plan.Gradients(x, y, grads); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, m.NumParams())
	clipped := 0
	for _, g := range grads {
		var sq float64
		for _, v := range g {
			sq += float64(v) * float64(v)
		}
		f := math.Min(1, norm/math.Sqrt(sq))
		if f < 1 {
			clipped++
		}
		for j, v := range g {
			want[j] += f * float64(v)
		}
	}
	var got []float64
	var ref []float64
	o := 0
	for _, r := range plan.Trainable() {
		for j := range r.Len {
			got = append(got, float64(dst[o+j]))
			ref = append(ref, want[r.Offset+j])
		}
		o += r.Len
	}
	if len(dst) != o || o >= m.NumParams() {
		t.Fatalf("%d trainable parameters of %d, engine gives %d", o, m.NumParams(), len(dst))
	}
	var diff, size float64
	for j := range got {
		diff = math.Max(diff, math.Abs(got[j]-ref[j]))
		size = math.Max(size, math.Abs(ref[j]))
	}
	if diff > 1e-5*size || size == 0 {
		t.Errorf("clipped sum differs from the reference by %g (largest entry %g)", diff, size)
	}
	if st.Examples != 4 || st.Clipped != float64(clipped)/4 {
		t.Errorf("stats %+v, want 4 examples, %d clipped", st, clipped)
	}
}

// TestRunLearns trains a tiny GPT from scratch, non-private, on a
// repetitive text: the held-out perplexity falls far below the
// vocabulary's 257.
func TestRunLearns(t *testing.T) {
	m := tinyGPT(t, false)
	b, err := seqtrain.NewBackend(m)
	if err != nil {
		t.Fatal(err)
	}
	d := corpus(t, 8)
	cfg := train.Config{Data: train.Data{Train: d, Test: d}, Model: train.ModelSpec{Backend: b}, NonPrivate: true,
		Privacy:   privacy.Request{Steps: 60, Batch: 16, ClipNorm: 1},
		Optimizer: train.Optimizer{Rule: train.OptimizerAdam, LearningRate: 3e-3}}
	res, err := train.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := math.Exp(res.Final.Loss); !(p < 8) {
		t.Errorf("perplexity after training %v, want below 8", p)
	}
}

// TestPrivateLoRAKeepsBase runs private LoRA steps: the frozen base is
// bit for bit what it was, the adapters moved.
func TestPrivateLoRAKeepsBase(t *testing.T) {
	m := tinyGPT(t, true)
	before := slices.Clone(m.Params())
	b, err := seqtrain.NewBackend(m)
	if err != nil {
		t.Fatal(err)
	}
	d := corpus(t, 8)
	cfg := train.Config{Data: train.Data{Train: d}, Model: train.ModelSpec{Backend: b},
		Privacy: privacy.Request{Steps: 3, Batch: 8, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1,
			Accountant: privacy.RDP, ClipNorm: 1, Seed: []byte("seqtrain lora"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 0.1}}
	if _, err := train.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	net, _, _ := models.TransformerOf(m)
	plan, _ := nn.NewSeqPlan(net, m.Params(), nn.Options{MaxBatch: 1})
	trainable := make([]bool, m.NumParams())
	for _, r := range plan.Trainable() {
		for j := range r.Len {
			trainable[r.Offset+j] = true
		}
	}
	after := b.Model().Params()
	moved := 0
	for j := range after {
		switch {
		case !trainable[j] && after[j] != before[j]:
			t.Fatalf("frozen parameter %d changed from %v to %v", j, before[j], after[j])
		case trainable[j] && after[j] != before[j]:
			moved++
		}
	}
	if moved == 0 {
		t.Error("no adapter parameter moved")
	}
}

func TestBackendRefuses(t *testing.T) {
	mlp, err := models.NewMLP([3]int{1, 2, 2}, []int{3}, 2, nn.Tanh, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seqtrain.NewBackend(mlp); err == nil {
		t.Error("an MLP accepted as a transformer")
	}
	b, _ := seqtrain.NewBackend(tinyGPT(t, false))
	eng, err := b.NewEngine(clip.Options{Norm: 1, MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	ic := eng.(interface{ CheckInputs([]float32) error })
	for _, bad := range [][]float32{
		{-1, 1, 2, 3, 4, 5, 6, 7},
		{1, -1, 2, 3, 4, 5, 6, 7},
		{1, 2, 3, 4, 5, 6, 7, 257},
		{1, 2, 3, 4, 5, 6, 7, 1.5},
		{1, 2, 3},
	} {
		if err := ic.CheckInputs(bad); err == nil {
			t.Errorf("CheckInputs(%v) accepted", bad)
		}
	}
	if err := ic.CheckInputs([]float32{1, 2, 3, -1, -1, -1, -1, -1}); err != nil {
		t.Errorf("a padded row: %v", err)
	}
}
