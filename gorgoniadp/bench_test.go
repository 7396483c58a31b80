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
// gorgonia adapter: compiled (gorgonia) and one example at a time
// (gorgonia-per-example).
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
	b.Run("gorgonia-per-example", func(b *testing.B) {
		e, err := gm.Engine(opt)
		if err != nil {
			b.Fatal(err)
		}
		e.fast = nil
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

// cnnGraph is the package example's CNN (gorgonia's Conv2d of 8 3x3
// kernels, stride 2, pad 1, plus a channel bias, Tanh, MaxPool2D 2x2, a
// dense layer of 10) over the parameters of mm, the same network from
// models.NewBuilder (fashionTwin): the kernel is the transpose of mm's
// convolution weight.
func cnnGraph(tb testing.TB, mm models.Model) *Model {
	tb.Helper()
	l := mm.Layout()
	at := func(i int) []float32 { return append([]float32(nil), mm.Params()[l[i].Offset:l[i].Offset+l[i].Len]...) }
	g := G.NewGraph()
	kv := make([]float32, 8*9)
	transpose32(kv, at(0), 9, 8)
	k := G.NewTensor(g, tensor.Float32, 4, G.WithShape(8, 1, 3, 3), G.WithName("conv"), G.WithValue(tensor.New(tensor.WithShape(8, 1, 3, 3), tensor.WithBacking(kv))))
	cb := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 8, 1, 1), G.WithName("conv-bias"), G.WithValue(tensor.New(tensor.WithShape(1, 8, 1, 1), tensor.WithBacking(at(1)))))
	w := G.NewMatrix(g, tensor.Float32, G.WithShape(392, 10), G.WithName("w"), G.WithValue(tensor.New(tensor.WithShape(392, 10), tensor.WithBacking(at(2)))))
	b := G.NewVector(g, tensor.Float32, G.WithShape(10), G.WithName("b"), G.WithValue(tensor.New(tensor.WithShape(10), tensor.WithBacking(at(3)))))
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 28, 28), G.WithName("x"))
	c := G.Must(G.Conv2d(x, k, tensor.Shape{3, 3}, []int{1, 1}, []int{2, 2}, []int{1, 1}))
	h := G.Must(G.Tanh(G.Must(G.BroadcastAdd(c, cb, nil, []byte{0, 2, 3}))))
	p := G.Must(G.MaxPool2D(h, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
	f := G.Must(G.Reshape(p, tensor.Shape{1, 392}))
	m, err := New("gorgonia-cnn", Graph{Input: x, Logits: dense(f, w, b), Params: []*G.Node{k, cb, w, b}})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkSideBySide times private steps (Poisson batches of 250
// expected, DP-SGD noise, the update: train.Trainer.TrainStep) of a
// built-in model and of the same network written in gorgonia, compiled,
// alternating one step of each (and which goes first) so that both see
// the same machine load,
// and reports the median step times and their ratio (-benchtime=Nx: N
// steps of each). mlp: the built-in "mlp" (784-128-10 tanh); cnn: the
// package example's CNN (with a convolution bias). With -perexample it
// also times the per-example path (5 steps; it is slow).
func BenchmarkSideBySide(b *testing.B) {
	trainSet, _, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		b.Fatal(err)
	}
	mlp, err := models.NewMLP([3]int{1, 28, 28}, []int{128}, 10, nn.Tanh, 1)
	if err != nil {
		b.Fatal(err)
	}
	cnn, _ := fashionTwin(b)
	for _, c := range []struct {
		name  string
		mm    models.Model
		graph func(testing.TB, models.Model) *Model
	}{{"mlp", mlp, mlpGraph}, {"cnn", cnn, cnnGraph}} {
		b.Run(c.name, func(b *testing.B) { sideBySide(b, trainSet, c.mm, c.graph) })
	}
}

func sideBySide(b *testing.B, trainSet *data.Dataset, mm models.Model, graph func(testing.TB, models.Model) *Model) {
	gm := graph(b, mm)
	if ok, why := gm.Compiled(); !ok {
		b.Fatal(why)
	}
	cfg := train.Config{
		Data:      train.Data{Train: trainSet},
		Privacy:   privacy.Request{Steps: 1 << 20, Batch: 250, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, Accountant: privacy.RDP, ClipNorm: 1, Seed: []byte("gorgoniadp side by side"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 0.5},
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
	a.Model.Built, c.Model.Backend = mm, gm
	builtin, compiled := trainer(a), trainer(c)
	step := func(t *train.Trainer) float64 {
		start := time.Now()
		if _, err := t.TrainStep(context.Background()); err != nil {
			b.Fatal(err)
		}
		return float64(time.Since(start).Microseconds()) / 1000
	}
	var tb, tc []float64
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 { // alternate which goes first
			tb = append(tb, step(builtin))
			tc = append(tc, step(compiled))
		} else {
			tc = append(tc, step(compiled))
			tb = append(tb, step(builtin))
		}
	}
	mb, mc := medianOf(tb), medianOf(tc)
	b.ReportMetric(mb, "builtin-ms/step")
	b.ReportMetric(mc, "compiled-ms/step")
	b.ReportMetric(mc/mb, "ratio")
	if *perExampleBench {
		slow := graph(b, mm)
		slow.fast = nil
		s := cfg
		s.Model.Backend = slow
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
