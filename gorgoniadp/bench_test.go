package gorgoniadp

import (
	"context"
	"flag"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// fashionTwin is the model of the package example (3x3 convolution of 8
// channels, stride 2, pad 1, tanh, 2x2 max pool, dense 10 logits on
// 1x28x28) as a models.Model for the nn executor and as a gorgonia graph
// over the same parameters.
func fashionTwin(tb testing.TB) (models.Model, *Model) {
	tb.Helper()
	mm, err := models.NewBuilder("fashion-twin", [3]int{1, 28, 28}, 3).
		Conv2D("conv", 8, 3, 2, 1, nn.Tanh).MaxPool(2).Dense("out", 10, nn.Identity).Model()
	if err != nil {
		tb.Fatal(err)
	}
	g := G.NewGraph()
	var params []*G.Node
	for _, p := range mm.Layout() {
		v := append([]float32(nil), mm.Params()[p.Offset:p.Offset+p.Len]...)
		params = append(params, G.NewTensor(g, tensor.Float32, len(p.Shape), G.WithShape(p.Shape...), G.WithName(p.Name),
			G.WithValue(tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(v)))))
	}
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 28, 28), G.WithName("x"))
	col := G.Must(G.Im2Col(x, tensor.Shape{3, 3}, tensor.Shape{1, 1}, tensor.Shape{2, 2}, tensor.Shape{1, 1}))
	u := G.Must(G.Reshape(col, tensor.Shape{14 * 14, 9}))
	z := G.Must(G.Tanh(dense(u, params[0], params[1])))
	z = G.Must(G.Transpose(G.Must(G.Reshape(z, tensor.Shape{1, 14, 14, 8})), 0, 3, 1, 2))
	p := G.Must(G.MaxPool2D(z, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
	f := G.Must(G.Reshape(p, tensor.Shape{1, 8 * 7 * 7}))
	gm, err := New("fashion-twin", Graph{Input: x, Logits: dense(f, params[2], params[3]), Params: params})
	if err != nil {
		tb.Fatal(err)
	}
	return mm, gm
}

// BenchmarkPrivateStep times the clipped sum of a batch of 64 (the
// private step's work; the noise and the update cost the same for both)
// for the package example's model, on the nn executor and through the
// gorgonia adapter.
func BenchmarkPrivateStep(b *testing.B) {
	const batch = 64
	mm, gm := fashionTwin(b)
	x, y := randomBatch(rand.New(rand.NewPCG(1, 1)), batch, 28*28, 10)
	opt := clip.Options{Norm: 1, MaxBatch: batch}
	b.Run("nn", func(b *testing.B) {
		e, err := clip.New(mm, opt)
		if err != nil {
			b.Fatal(err)
		}
		dst := make([]float32, mm.NumParams())
		for b.Loop() {
			if _, err := e.ClippedSum(x, y, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gorgonia", func(b *testing.B) {
		e, err := gm.Engine(opt)
		if err != nil {
			b.Fatal(err)
		}
		dst := make([]float32, gm.NumParams())
		for b.Loop() {
			if _, err := e.ClippedSum(x, y, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// mlpGraph is the 784-128-10 tanh MLP of issue 40 as a user writes it in
// gorgonia, with the built-in "mlp" model's initial parameters.
func mlpGraph(tb testing.TB, mm models.Model) *Model {
	tb.Helper()
	g := G.NewGraph()
	var ps []*G.Node
	for _, p := range mm.Layout() {
		v := append([]float32(nil), mm.Params()[p.Offset:p.Offset+p.Len]...)
		ps = append(ps, G.NewTensor(g, tensor.Float32, len(p.Shape), G.WithShape(p.Shape...), G.WithName(p.Name),
			G.WithValue(tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(v)))))
	}
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 784), G.WithName("x"))
	h := G.Must(G.Tanh(dense(x, ps[0], ps[1])))
	m, err := New("gorgonia-mlp", Graph{Input: x, Logits: dense(h, ps[2], ps[3]), Params: ps, Shape: [3]int{1, 28, 28}})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkMLPSideBySide times private steps (Poisson batches of 250
// expected, DP-SGD noise, the update: train.Trainer.TrainStep) of the
// built-in "mlp" (784-128-10 tanh) and of the same MLP written in
// gorgonia, compiled, alternating one step of each so that both see the
// same machine load, and reports the median step times and their ratio
// (-benchtime=Nx: N steps of each). With -perexample it also times the
// per-example path (a few steps; it is slow).
func BenchmarkMLPSideBySide(b *testing.B) {
	trainSet, _, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		b.Fatal(err)
	}
	mm, err := models.NewMLP([3]int{1, 28, 28}, []int{128}, 10, nn.Tanh, 1)
	if err != nil {
		b.Fatal(err)
	}
	gm := mlpGraph(b, mm)
	if ok, why := gm.Compiled(); !ok {
		b.Fatal(why)
	}
	cfg := train.Config{
		Train: trainSet, Steps: 1 << 20, Batch: 250, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, Accountant: privacy.RDP,
		LearningRate: 0.5, ClipNorm: 1, Seed: []byte("gorgoniadp side by side"), InsecureSeed: true,
	}
	trainer := func(c train.Config) *train.Trainer {
		t, err := train.New(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { t.Close() })
		return t
	}
	a, c := cfg, cfg
	a.Model, c.Backend = mm, gm
	builtin, compiled := trainer(a), trainer(c)
	step := func(t *train.Trainer) float64 {
		start := time.Now()
		if _, err := t.TrainStep(context.Background()); err != nil {
			b.Fatal(err)
		}
		return float64(time.Since(start).Microseconds()) / 1000
	}
	var tb, tc []float64
	for b.Loop() {
		tb = append(tb, step(builtin))
		tc = append(tc, step(compiled))
	}
	mb, mc := medianOf(tb), medianOf(tc)
	b.ReportMetric(mb, "builtin-ms/step")
	b.ReportMetric(mc, "compiled-ms/step")
	b.ReportMetric(mc/mb, "ratio")
	if *perExampleBench {
		slow := mlpGraph(b, mm)
		slow.fast = nil
		s := cfg
		s.Backend = slow
		st := trainer(s)
		var ts []float64
		for range 5 {
			ts = append(ts, step(st))
		}
		b.ReportMetric(medianOf(ts), "perexample-ms/step")
	}
}

var perExampleBench = flag.Bool("perexample", false, "BenchmarkMLPSideBySide: also time the per-example path")

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
