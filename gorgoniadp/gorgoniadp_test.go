package gorgoniadp

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/dpcore"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// param adds a float32 parameter node with values drawn from rng.
func param(g *G.ExprGraph, rng *rand.Rand, name string, scale float64, shape ...int) *G.Node {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(scale * rng.NormFloat64())
	}
	return G.NewTensor(g, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name),
		G.WithValue(tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))))
}

// dense is x W + b.
func dense(x, w, b *G.Node) *G.Node {
	return G.Must(G.BroadcastAdd(G.Must(G.Mul(x, w)), b, nil, []byte{0}))
}

// opCase builds the graph of one example; every supported op appears in
// at least one case.
type opCase struct {
	name  string
	shape [3]int
	build func(g *G.ExprGraph, rng *rand.Rand) Graph
}

var opCases = []opCase{
	{"dense-relu", [3]int{12, 1, 1}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 12), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.5, 12, 6), param(g, rng, "b1", 0.1, 6)
		w2, b2 := param(g, rng, "w2", 0.5, 6, 3), param(g, rng, "b2", 0.1, 3)
		h := G.Must(G.Rectify(dense(x, w1, b1)))
		return Graph{Input: x, Logits: dense(h, w2, b2), Params: []*G.Node{w1, b1, w2, b2}}
	}},
	{"conv-tanh-maxpool", [3]int{2, 6, 6}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, 6, 6), G.WithName("x"))
		k := param(g, rng, "k", 0.4, 3, 2, 3, 3)
		w, b := param(g, rng, "w", 0.3, 27, 4), param(g, rng, "b", 0.1, 4)
		c := G.Must(G.Tanh(G.Must(G.Conv2d(x, k, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}))))
		p := G.Must(G.MaxPool2D(c, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
		f := G.Must(G.Reshape(p, tensor.Shape{1, 27}))
		return Graph{Input: x, Logits: dense(f, w, b), Params: []*G.Node{k, w, b}}
	}},
	// (AveragePool2D trains only compiled: gorgonia's own gradient of it
	// is wrong, TestAveragePool2D.)
	{"conv-sigmoid-maxpool", [3]int{1, 6, 6}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 6, 6), G.WithName("x"))
		k := param(g, rng, "k", 0.5, 4, 1, 3, 3)
		w := param(g, rng, "w", 0.5, 16, 3)
		c := G.Must(G.Sigmoid(G.Must(G.Conv2d(x, k, tensor.Shape{3, 3}, []int{0, 0}, []int{1, 1}, []int{1, 1}))))
		a := G.Must(G.MaxPool2D(c, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
		f := G.Must(G.Reshape(a, tensor.Shape{1, 16}))
		return Graph{Input: x, Logits: G.Must(G.Mul(f, w)), Params: []*G.Node{k, w}}
	}},
	{"elementwise-user-loss", [3]int{5, 1, 1}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 5), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.5, 5, 4), param(g, rng, "b1", 0.1, 4)
		w2 := param(g, rng, "w2", 0.5, 10, 3)
		z := dense(x, w1, b1)
		// square, exp, neg, abs, sqrt, ln, softplus, Sub, Div, Add
		a := G.Must(G.Square(G.Must(G.Tanh(z))))
		b := G.Must(G.Exp(G.Must(G.Neg(G.Must(G.Abs(z))))))
		one := G.NewConstant(float32(1))
		c := G.Must(G.Sqrt(G.Must(G.Add(G.Must(G.Square(z)), one))))
		d := G.Must(G.Log(G.Must(G.Add(G.Must(G.Softplus(z)), one))))
		e := G.Must(G.Div(G.Must(G.Sub(a, b)), c))
		h := G.Must(G.Concat(1, G.Must(G.Add(e, d)), z, G.Must(G.Slice(z, nil, G.S(0, 2)))))
		logits := G.Must(G.Mul(h, w2))
		// The user's own loss: mean over classes of -label * log softmax,
		// times the number of classes (Mean, SoftMax, Log, Transpose).
		label := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 3), G.WithName("label"))
		lp := G.Must(G.Log(G.Must(G.SoftMax(logits))))
		m := G.Must(G.Mean(G.Must(G.HadamardProd(G.Must(G.Transpose(label)), G.Must(G.Transpose(lp))))))
		loss := G.Must(G.Mul(m, G.NewConstant(float32(-3))))
		return Graph{Input: x, Logits: logits, Label: label, Loss: loss, Params: []*G.Node{w1, b1, w2}}
	}},
	// LeakyRelu (its x < 0 comparison), without biases.
	{"dense-leakyrelu", [3]int{6, 1, 1}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 6), G.WithName("x"))
		w1, w2 := param(g, rng, "w1", 0.6, 6, 5), param(g, rng, "w2", 0.6, 5, 3)
		h := G.Must(G.LeakyRelu(G.Must(G.Mul(x, w1)), 0.1))
		return Graph{Input: x, Logits: G.Must(G.Mul(h, w2)), Params: []*G.Node{w1, w2}}
	}},
}

// reference computes the gradient of one example on a graph built afresh
// for it alone: the brute-force batch of one with gorgonia's own backward.
func reference(t *testing.T, oc opCase, seed uint64, x []float32, y int) (loss float64, grad []float32) {
	t.Helper()
	g := G.NewGraph()
	gr := oc.build(g, rand.New(rand.NewPCG(seed, 1)))
	in := gr.Input.Shape()
	if err := G.Let(gr.Input, tensor.New(tensor.WithShape(in...), tensor.WithBacking(append([]float32(nil), x...)))); err != nil {
		t.Fatal(err)
	}
	lossNode := gr.Loss
	k := gr.Logits.Shape().TotalSize()
	oh := make([]float32, k)
	oh[y] = 1
	if lossNode == nil {
		lsm := G.Must(G.LogSoftMax(gr.Logits))
		lab := G.NewTensor(g, tensor.Float32, gr.Logits.Dims(), G.WithShape(gr.Logits.Shape()...), G.WithValue(tensor.New(tensor.WithShape(gr.Logits.Shape()...), tensor.WithBacking(oh))))
		lossNode = G.Must(G.Neg(G.Must(G.Sum(G.Must(G.HadamardProd(lab, lsm))))))
	} else if err := G.Let(gr.Label, tensor.New(tensor.WithShape(gr.Label.Shape()...), tensor.WithBacking(oh))); err != nil {
		t.Fatal(err)
	}
	grads, err := G.Grad(lossNode, gr.Params...)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	lv, _ := float32s(lossNode.Value())
	for _, gn := range grads {
		d, err := float32s(gn.Value())
		if err != nil {
			t.Fatal(err)
		}
		grad = append(grad, d...)
	}
	return float64(lv[0]), grad
}

func randomBatch(rng *rand.Rand, n, chw, classes int) ([]float32, []int) {
	x := make([]float32, n*chw)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int, n)
	for i := range y {
		y[i] = rng.IntN(classes)
	}
	return x, y
}

// close32 says whether a and b agree to float32 rounding: 1e-5 relative
// to the larger magnitude of the vector.
func close32(a, b []float32) (int, bool) {
	scale := 0.0
	for _, v := range b {
		scale = max(scale, math.Abs(float64(v)))
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-5*(scale+1e-30) {
			return i, false
		}
	}
	return -1, len(a) == len(b)
}

// TestPerExample checks, for every case of supported ops, that the
// adapter's per-example gradients (one compiled graph reused across
// examples) equal the brute-force reference of a fresh graph per example,
// and that its clipped sum equals the sum of the reference gradients
// clipped in float64.
func TestPerExample(t *testing.T) {
	for ci, oc := range opCases {
		t.Run(oc.name, func(t *testing.T) {
			seed := uint64(10 + ci)
			g := G.NewGraph()
			m, err := New(oc.name, oc.build(g, rand.New(rand.NewPCG(seed, 1))))
			if err != nil {
				t.Fatal(err)
			}
			if m.InputShape() != oc.shape {
				t.Fatalf("input shape %v, want %v", m.InputShape(), oc.shape)
			}
			const n = 6
			chw := oc.shape[0] * oc.shape[1] * oc.shape[2]
			rng := rand.New(rand.NewPCG(seed, 2))
			x, y := randomBatch(rng, n, chw, m.Classes())
			e, err := m.Engine(clip.Options{Norm: 0.5, MaxBatch: n})
			if err != nil {
				t.Fatal(err)
			}
			d := m.NumParams()
			got := make([]float32, d)
			want := make([]float64, d)
			var norms []float64
			for i := range n {
				xi := x[i*chw : (i+1)*chw]
				l, err := e.Gradient(xi, y[i], got)
				if err != nil {
					t.Fatal(err)
				}
				rl, ref := reference(t, oc, seed, xi, y[i])
				if j, ok := close32(got, ref); !ok {
					t.Fatalf("example %d: gradient entry %d: adapter %v, reference %v", i, j, got[max(j, 0)], ref[max(j, 0)])
				}
				if math.Abs(l-rl) > 1e-6*(1+math.Abs(rl)) {
					t.Fatalf("example %d: loss %v, reference %v", i, l, rl)
				}
				sq := 0.0
				for _, v := range ref {
					sq += float64(v) * float64(v)
				}
				nrm := math.Sqrt(sq)
				norms = append(norms, nrm)
				c := min(1, 0.5/nrm)
				for j, v := range ref {
					want[j] += c * float64(v)
				}
			}
			sum := make([]float32, d)
			st, err := e.ClippedSum(x, y, sum)
			if err != nil {
				t.Fatal(err)
			}
			w32 := make([]float32, d)
			for j := range want {
				w32[j] = float32(want[j])
			}
			if j, ok := close32(sum, w32); !ok {
				t.Fatalf("clipped sum entry %d: %v, reference %v", j, sum[j], w32[j])
			}
			if st.Examples != n || st.NonFinite != 0 || st.NormQuantiles[3] <= 0 {
				t.Fatalf("stats %+v", st)
			}
			maxNorm := 0.0
			for _, v := range norms {
				maxNorm = max(maxNorm, v)
			}
			if math.Abs(st.NormQuantiles[3]-maxNorm) > 1e-5*maxNorm {
				t.Fatalf("largest norm %v, reference %v", st.NormQuantiles[3], maxNorm)
			}
		})
	}
}

// TestClipBound checks that each clipped contribution has norm at most
// the clip norm in float64, exactly, over examples with large gradients.
func TestClipBound(t *testing.T) {
	oc := opCases[0]
	m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(3, 1))))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Params() {
		m.Params()[i] *= 30
	}
	const zeta = 1e-4
	e, err := m.Engine(clip.Options{Norm: zeta, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 2))
	sum := make([]float32, m.NumParams())
	clippedSeen := 0
	for range 200 {
		x, y := randomBatch(rng, 1, 12, 3)
		st, err := e.ClippedSum(x, y, sum)
		if err != nil {
			t.Fatal(err)
		}
		if st.Clipped > 0 {
			clippedSeen++
		}
		sq := 0.0
		for _, v := range sum {
			sq += float64(v) * float64(v)
		}
		if math.Sqrt(sq) > zeta {
			t.Fatalf("clipped contribution has norm %v > %v", math.Sqrt(sq), zeta)
		}
	}
	if clippedSeen < 100 {
		t.Fatalf("only %d of 200 examples were clipped: the test does not exercise clipping", clippedSeen)
	}
}

// TestRefused checks that ops that mix examples, random ops and ops
// without a tested rule are refused with one line naming the op, and
// that graphs of more than one example are refused.
func TestRefused(t *testing.T) {
	cases := []struct {
		name, want string
		build      func(g *G.ExprGraph, rng *rand.Rand) Graph
	}{
		{"batchnorm", "BatchNorm mixes", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 4, 4), G.WithName("x"))
			k := param(g, rng, "k", 0.5, 2, 1, 3, 3)
			c := G.Must(G.Conv2d(x, k, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}))
			bn, _, _, _, err := G.BatchNorm(c, nil, nil, 0.9, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			w := param(g, rng, "w", 0.5, 32, 3)
			return Graph{Input: x, Logits: G.Must(G.Mul(G.Must(G.Reshape(bn, tensor.Shape{1, 32})), w)), Params: []*G.Node{k, w}}
		}},
		{"dropout", "Dropout draws", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			// (Dropout compiles, TestDropout; not after Softplus.)
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 4), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 4, 3)
			return Graph{Input: x, Logits: G.Must(G.Dropout(G.Must(G.Softplus(G.Must(G.Mul(x, w)))), 0.5)), Params: []*G.Node{w}}
		}},
		{"max", "Max has no", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 4), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 4, 3)
			z := G.Must(G.Mul(x, w))
			return Graph{Input: x, Logits: G.Must(G.BroadcastSub(z, G.Must(G.Max(z)), nil, nil)), Params: []*G.Node{w}}
		}},
		{"global average pool (no gradient in gorgonia)", "GlobalAveragePool2D has no", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, 4, 4), G.WithName("x"))
			k := param(g, rng, "k", 0.5, 3, 2, 3, 3)
			c := G.Must(G.Conv2d(x, k, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}))
			w := param(g, rng, "w", 0.5, 3, 3)
			gp := G.Must(G.Reshape(G.Must(G.GlobalAveragePool2D(c)), tensor.Shape{1, 3}))
			return Graph{Input: x, Logits: G.Must(G.Mul(gp, w)), Params: []*G.Node{k, w}}
		}},
		{"pow", "Pow has no", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 4), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 4, 3)
			return Graph{Input: x, Logits: G.Must(G.Pow(G.Must(G.Mul(x, w)), G.NewConstant(float32(2)))), Params: []*G.Node{w}}
		}},
		{"cube", "Cube has no", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 4), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 4, 3)
			return Graph{Input: x, Logits: G.Must(G.Cube(G.Must(G.Mul(x, w)))), Params: []*G.Node{w}}
		}},
		{"lt", "Lt has no", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 4), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 4, 3)
			z := G.Must(G.Mul(x, w))
			return Graph{Input: x, Logits: G.Must(G.HadamardProd(z, G.Must(G.Lt(z, G.NewConstant(float32(1)), true)))), Params: []*G.Node{w}}
		}},
		{"named node", "Cube (node cubed) has no", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 4), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 4, 3)
			c := G.Must(G.Cube(G.Must(G.Mul(x, w))))
			G.WithName("cubed")(c)
			return Graph{Input: x, Logits: c, Params: []*G.Node{w}}
		}},
		{"data shape", "set Graph.Shape", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 12), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 12, 3)
			return Graph{Input: x, Logits: G.Must(G.Mul(x, w)), Params: []*G.Node{w}, Shape: [3]int{1, 28, 28}}
		}},
		{"unbound input", "has no value", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 4), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 4, 3)
			frozen := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 3), G.WithName("frozen"))
			return Graph{Input: x, Logits: G.Must(G.Add(G.Must(G.Mul(x, w)), frozen)), Params: []*G.Node{w}}
		}},
		{"batch of two", "graph of one example", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 4), G.WithName("x"))
			w := param(g, rng, "w", 0.5, 4, 3)
			return Graph{Input: x, Logits: G.Must(G.Mul(x, w)), Params: []*G.Node{w}}
		}},
	}
	for _, tc := range cases {
		_, err := New(tc.name, tc.build(G.NewGraph(), rand.New(rand.NewPCG(1, 1))))
		if err == nil {
			t.Fatalf("%s: accepted", tc.name)
		}
		msg := err.Error()
		if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "gorgoniadp: ") {
			t.Fatalf("%s: error %q: want one line naming %q, matching dpcore.ErrInvalid", tc.name, msg, tc.want)
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

// TestSaveLoad round-trips the parameters and refuses a file of another
// graph and a corrupted one.
func TestSaveLoad(t *testing.T) {
	oc := opCases[1]
	m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(5, 1))))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := m.Save(&buf); err != nil {
		t.Fatal(err)
	}
	saved := append([]float32(nil), m.Params()...)
	clear(m.Params())
	if err := m.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	for i, v := range saved {
		if m.Params()[i] != v {
			t.Fatalf("parameter %d: %v after load, %v saved", i, m.Params()[i], v)
		}
	}
	// The node's value is the flat buffer: the graph sees the load.
	k := m.Tensors()[0].Data().([]float32)
	if &k[0] != &m.Params()[0] {
		t.Fatal("parameter tensor does not view the flat buffer")
	}
	other, err := New("dense", opCases[0].build(G.NewGraph(), rand.New(rand.NewPCG(5, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Load(bytes.NewReader(buf.Bytes())); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("loading another graph's file: %v", err)
	}
	b := buf.Bytes()
	b[len(b)-3] ^= 1
	if err := m.Load(bytes.NewReader(b)); !errors.Is(err, dpcore.ErrInvalid) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("corrupt file: %v", err)
	}
}

// FuzzLoad feeds Load arbitrary bytes: it returns an error or loads
// values of the right count, and never panics.
func FuzzLoad(f *testing.F) {
	oc := opCases[0]
	m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(6, 1))))
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if err := m.Save(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:len(buf.Bytes())/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := m.Load(bytes.NewReader(b)); err != nil {
			if !errors.Is(err, dpcore.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q: want one line matching dpcore.ErrInvalid", err)
			}
		}
	})
}

// TestContext checks that a cancelled context stops the clipped sum and
// the evaluation with its error.
func TestContext(t *testing.T) {
	oc := opCases[0]
	m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(8, 1))))
	if err != nil {
		t.Fatal(err)
	}
	e, err := m.Engine(clip.Options{Norm: 1, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	x, y := randomBatch(rand.New(rand.NewPCG(8, 2)), 4, 12, 3)
	if _, err := e.ClippedSumContext(ctx, x, y, make([]float32, m.NumParams())); !errors.Is(err, context.Canceled) {
		t.Fatalf("clipped sum: %v", err)
	}
	if _, _, err := e.EvaluateContext(ctx, x, y); !errors.Is(err, context.Canceled) {
		t.Fatalf("evaluate: %v", err)
	}
}
