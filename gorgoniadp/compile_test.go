package gorgoniadp

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// im2colConv is a convolution in the built-in layer's layout: W of shape
// (c*k*k, out) over gorgonia's Im2Col, bias b, activation act (nil:
// none), on x of shape (1, c, h, w); the output is (1, out, h', w').
func im2colConv(x, w, b *G.Node, k, stride, pad int, act func(*G.Node) (*G.Node, error)) *G.Node {
	s := x.Shape()
	h := (s[2]+2*pad-k)/stride + 1
	wd := (s[3]+2*pad-k)/stride + 1
	col := G.Must(G.Im2Col(x, tensor.Shape{k, k}, tensor.Shape{pad, pad}, tensor.Shape{stride, stride}, tensor.Shape{1, 1}))
	u := G.Must(G.Reshape(col, tensor.Shape{h * wd, s[1] * k * k}))
	z := dense(u, w, b)
	if act != nil {
		z = G.Must(act(z))
	}
	out := w.Shape()[1]
	return G.Must(G.Transpose(G.Must(G.Reshape(z, tensor.Shape{1, h, wd, out})), 0, 3, 1, 2))
}

// compileCases are graphs the compiler reads as built-in layers; every
// recognized pattern appears in at least one.
var compileCases = []opCase{
	{"mlp-tanh", [3]int{12, 1, 1}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 12), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.6, 12, 8), param(g, rng, "b1", 0.3, 8)
		w2, b2 := param(g, rng, "w2", 0.6, 8, 4), param(g, rng, "b2", 0.3, 4)
		h := G.Must(G.Tanh(dense(x, w1, b1)))
		return Graph{Input: x, Logits: dense(h, w2, b2), Params: []*G.Node{w1, b1, w2, b2}}
	}},
	// Rectify; a (1, out) bias added without a broadcast; a spatial input
	// flattened by Reshape; LogSoftMax of the logits.
	{"flatten-relu-add-logsoftmax", [3]int{2, 3, 3}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, 3, 3), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.6, 18, 7), param(g, rng, "b1", 0.3, 1, 7)
		w2, b2 := param(g, rng, "w2", 0.6, 7, 3), param(g, rng, "b2", 0.3, 3)
		f := G.Must(G.Reshape(x, tensor.Shape{1, 18}))
		h := G.Must(G.Rectify(G.Must(G.Add(G.Must(G.Mul(f, w1)), b1))))
		return Graph{Input: x, Logits: G.Must(G.LogSoftMax(dense(h, w2, b2))), Params: []*G.Node{w1, b1, w2, b2}}
	}},
	// The graph's own cross-entropy loss.
	{"user-cross-entropy", [3]int{6, 1, 1}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 6), G.WithName("x"))
		w, b := param(g, rng, "w", 0.8, 6, 3), param(g, rng, "b", 0.3, 3)
		logits := dense(x, w, b)
		label := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 3), G.WithName("label"))
		loss := G.Must(G.Neg(G.Must(G.Sum(G.Must(G.HadamardProd(label, G.Must(G.LogSoftMax(logits))))))))
		return Graph{Input: x, Logits: logits, Label: label, Loss: loss, Params: []*G.Node{w, b}}
	}},
	// Convolutions (stride 1 pad 1 with Tanh; stride 2 pad 0 with
	// Rectify), MaxPool2D, on a flat input node reshaped to the data's
	// shape (Graph.Shape).
	{"conv-tanh-maxpool-conv-relu", [3]int{2, 8, 8}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 128), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.4, 18, 3), param(g, rng, "b1", 0.2, 3)
		w2, b2 := param(g, rng, "w2", 0.4, 12, 4), param(g, rng, "b2", 0.2, 4)
		w3, b3 := param(g, rng, "w3", 0.5, 4, 3), param(g, rng, "b3", 0.2, 3)
		im := G.Must(G.Reshape(x, tensor.Shape{1, 2, 8, 8}))
		c := im2colConv(im, w1, b1, 3, 1, 1, G.Tanh)
		p := G.Must(G.MaxPool2D(c, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
		c2 := im2colConv(p, w2, b2, 2, 2, 0, G.Rectify)
		p2 := G.Must(G.MaxPool2D(c2, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
		f := G.Must(G.Reshape(p2, tensor.Shape{1, 4}))
		return Graph{Input: x, Logits: dense(f, w3, b3), Params: []*G.Node{w1, b1, w2, b2, w3, b3}, Shape: [3]int{2, 8, 8}}
	}},
	// gorgonia's Conv2d with a channel bias: a (1, out, 1, 1) parameter
	// with Tanh, a (out) vector reshaped with Rectify.
	{"conv2d-bias", [3]int{2, 7, 7}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, 7, 7), G.WithName("x"))
		k1, b1 := param(g, rng, "k1", 0.4, 3, 2, 3, 3), param(g, rng, "b1", 0.2, 1, 3, 1, 1)
		k2, b2 := param(g, rng, "k2", 0.4, 4, 3, 2, 2), param(g, rng, "b2", 0.2, 4)
		w, b := param(g, rng, "w", 0.5, 36, 3), param(g, rng, "b", 0.2, 3)
		c1 := G.Must(G.Conv2d(x, k1, tensor.Shape{3, 3}, []int{1, 1}, []int{2, 2}, []int{1, 1})) // (1, 3, 4, 4)
		h1 := G.Must(G.Tanh(G.Must(G.BroadcastAdd(c1, b1, nil, []byte{0, 2, 3}))))
		c2 := G.Must(G.Conv2d(h1, k2, tensor.Shape{2, 2}, []int{0, 0}, []int{1, 1}, []int{1, 1})) // (1, 4, 3, 3)
		b2r := G.Must(G.Reshape(b2, tensor.Shape{1, 4, 1, 1}))
		h2 := G.Must(G.Rectify(G.Must(G.BroadcastAdd(b2r, c2, []byte{0, 2, 3}, nil))))
		h3 := G.Must(G.Reshape(h2, tensor.Shape{1, 36}))
		return Graph{Input: x, Logits: dense(h3, w, b), Params: []*G.Node{k1, b1, k2, b2, w, b}}
	}},
	// Layers without a bias: gorgonia's Conv2d with Tanh and bare, a
	// convolution in the built-in layout, a dense layer Mul(x, W).
	{"no-bias", [3]int{2, 6, 6}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, 6, 6), G.WithName("x"))
		k1, w2 := param(g, rng, "k1", 0.4, 3, 2, 3, 3), param(g, rng, "w2", 0.4, 12, 4)
		k3, w4 := param(g, rng, "k3", 0.5, 2, 4, 1, 1), param(g, rng, "w4", 0.5, 8, 3)
		c1 := G.Must(G.Tanh(G.Must(G.Conv2d(x, k1, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1})))) // (1, 3, 6, 6)
		p1 := G.Must(G.MaxPool2D(c1, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))                              // (1, 3, 3, 3)
		col := G.Must(G.Im2Col(p1, tensor.Shape{2, 2}, tensor.Shape{0, 0}, tensor.Shape{1, 1}, tensor.Shape{1, 1}))
		z := G.Must(G.Mul(G.Must(G.Reshape(col, tensor.Shape{4, 12})), w2))
		c2 := G.Must(G.Transpose(G.Must(G.Reshape(z, tensor.Shape{1, 2, 2, 4})), 0, 3, 1, 2))     // (1, 4, 2, 2)
		c3 := G.Must(G.Conv2d(c2, k3, tensor.Shape{1, 1}, []int{0, 0}, []int{1, 1}, []int{1, 1})) // (1, 2, 2, 2)
		return Graph{Input: x, Logits: G.Must(G.Mul(G.Must(G.Reshape(c3, tensor.Shape{1, 8})), w4)), Params: []*G.Node{k1, w2, k3, w4}}
	}},
	// Sigmoid and LeakyRelu after dense layers.
	{"mlp-sigmoid-leakyrelu", [3]int{10, 1, 1}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 10), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.6, 10, 8), param(g, rng, "b1", 0.3, 8)
		w2, b2 := param(g, rng, "w2", 0.6, 8, 6), param(g, rng, "b2", 0.3, 6)
		w3, b3 := param(g, rng, "w3", 0.6, 6, 3), param(g, rng, "b3", 0.3, 3)
		h1 := G.Must(G.Sigmoid(dense(x, w1, b1)))
		h2 := G.Must(G.LeakyRelu(dense(h1, w2, b2), 0.1))
		return Graph{Input: x, Logits: dense(h2, w3, b3), Params: []*G.Node{w1, b1, w2, b2, w3, b3}}
	}},
	// Sigmoid and LeakyRelu after convolutions: Im2Col with LeakyRelu,
	// gorgonia's Conv2d with a channel bias and Sigmoid.
	{"conv-leakyrelu-conv2d-sigmoid", [3]int{2, 6, 6}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, 6, 6), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.4, 18, 3), param(g, rng, "b1", 0.2, 3)
		k2, b2 := param(g, rng, "k2", 0.4, 4, 3, 2, 2), param(g, rng, "b2", 0.2, 1, 4, 1, 1)
		w, b := param(g, rng, "w", 0.5, 16, 3), param(g, rng, "b", 0.2, 3)
		leaky := func(n *G.Node) (*G.Node, error) { return G.LeakyRelu(n, 0.2) }
		c1 := im2colConv(x, w1, b1, 3, 1, 1, leaky) // (1, 3, 6, 6)
		p1 := G.Must(G.MaxPool2D(c1, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
		c2 := G.Must(G.Conv2d(p1, k2, tensor.Shape{2, 2}, []int{1, 1}, []int{1, 1}, []int{1, 1})) // (1, 4, 4, 4)
		h2 := G.Must(G.Sigmoid(G.Must(G.BroadcastAdd(c2, b2, nil, []byte{0, 2, 3}))))
		p2 := G.Must(G.MaxPool2D(h2, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2})) // (1, 4, 2, 2)
		h3 := G.Must(G.Reshape(p2, tensor.Shape{1, 16}))
		return Graph{Input: x, Logits: dense(h3, w, b), Params: []*G.Node{w1, b1, k2, b2, w, b}}
	}},
}

// handLayerNorm is a layer norm of x (1, D) written by hand without
// this package's helper: Mean over axis 1, broadcasts by
// BroadcastSub/BroadcastHadamardDiv, gamma and beta of shape (1, D).
// The near misses, other functions than the built-in layer's: variant
// "eps-outside" puts eps outside the Sqrt (Sqrt(var) + eps), "unbiased"
// divides the squares by D - 1.
func handLayerNorm(x, gamma, beta *G.Node, eps float32, variant string) *G.Node {
	d := x.Shape()[1]
	mu := G.Must(G.Reshape(G.Must(G.Mean(x, 1)), tensor.Shape{1, 1}))
	c := G.Must(G.BroadcastSub(x, mu, nil, []byte{1}))
	v := G.Must(G.Mean(G.Must(G.Square(c)), 1))
	if variant == "unbiased" {
		v = G.Must(G.HadamardDiv(G.Must(G.Sum(G.Must(G.Square(c)), 1)), G.NewConstant(float32(d-1))))
	}
	var sd *G.Node
	if variant == "eps-outside" {
		sd = G.Must(G.Add(G.Must(G.Sqrt(v)), G.NewConstant(eps)))
	} else {
		sd = G.Must(G.Sqrt(G.Must(G.Add(G.NewConstant(eps), v))))
	}
	xh := G.Must(G.BroadcastHadamardDiv(c, G.Must(G.Reshape(sd, tensor.Shape{1, 1})), nil, []byte{1}))
	return G.Must(G.Add(beta, G.Must(G.HadamardProd(gamma, xh))))
}

// nearMissNorm is a dense layer, handLayerNorm(eps, variant) and a dense
// layer.
func nearMissNorm(eps float32, variant string) func(g *G.ExprGraph, rng *rand.Rand) Graph {
	return func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 5), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.5, 5, 4), param(g, rng, "b1", 0.1, 4)
		g1, be1 := param(g, rng, "g1", 0.8, 1, 4), param(g, rng, "be1", 0.3, 1, 4)
		w2, b2 := param(g, rng, "w2", 0.5, 4, 3), param(g, rng, "b2", 0.1, 3)
		h := handLayerNorm(dense(x, w1, b1), g1, be1, eps, variant)
		return Graph{Input: x, Logits: dense(h, w2, b2), Params: []*G.Node{w1, b1, g1, be1, w2, b2}}
	}
}

// normCases are the LayerNorm graphs of compileCases (with normMapCase).
var normCases = []opCase{
	// LayerNorm (this package's helper) with Tanh between dense layers,
	// and a hand-written one with Rectify.
	{"mlp-layernorm", [3]int{10, 1, 1}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 10), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.6, 10, 8), param(g, rng, "b1", 0.3, 8)
		g1, be1 := param(g, rng, "g1", 0.8, 1, 8), param(g, rng, "be1", 0.3, 1, 8)
		w2, b2 := param(g, rng, "w2", 0.6, 8, 6), param(g, rng, "b2", 0.3, 6)
		g2, be2 := param(g, rng, "g2", 0.8, 1, 6), param(g, rng, "be2", 0.3, 1, 6)
		w3, b3 := param(g, rng, "w3", 0.6, 6, 3), param(g, rng, "b3", 0.3, 3)
		h1 := G.Must(G.Tanh(G.Must(LayerNorm(dense(x, w1, b1), g1, be1, 1e-5))))
		h2 := G.Must(G.Rectify(handLayerNorm(dense(h1, w2, b2), g2, be2, 1e-3, "")))
		return Graph{Input: x, Logits: dense(h2, w3, b3), Params: []*G.Node{w1, b1, g1, be1, w2, b2, g2, be2, w3, b3}}
	}},
}

func init() { compileCases = append(compileCases, append(normCases, normMapCase)...) }

// perExample returns an engine of m on the per-example path (one gorgonia
// pass per example), the reference the compiled path must equal.
func perExample(t *testing.T, m *Model, opt clip.Options) *Engine {
	t.Helper()
	e, err := m.Engine(opt)
	if err != nil {
		t.Fatal(err)
	}
	e.fast = nil
	return e
}

// centralDifference is the central difference (in float64, over the
// float32 steps actually taken) of the loss of example x with label y
// under fwd in parameter j of m, with step h; it leaves the parameter as
// it was.
func centralDifference(t *testing.T, m *Model, fwd *Engine, x []float32, y, j int, h float32) float64 {
	t.Helper()
	old := m.flat[j]
	m.flat[j] = old + h
	lp, _, err := fwd.Evaluate(x, []int{y})
	if err != nil {
		t.Fatal(err)
	}
	m.flat[j] = old - h
	lm, _, err := fwd.Evaluate(x, []int{y})
	m.flat[j] = old
	if err != nil {
		t.Fatal(err)
	}
	return (lp - lm) / (float64(old+h) - float64(old-h))
}

// TestCompiledEqualsPerExample checks, for every compiled pattern, that
// the batched executor's per-example gradients (batches of one, not
// clipped), clipped sums, statistics and evaluation equal the
// per-example path's and a fresh graph's per example, to float32
// rounding: 1e-5 relative to the vector's largest entry (close32); norm
// quantiles and losses to 1e-5 relative.
func TestCompiledEqualsPerExample(t *testing.T) {
	for ci, oc := range compileCases {
		t.Run(oc.name, func(t *testing.T) {
			seed := uint64(50 + ci)
			m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(seed, 1))))
			if err != nil {
				t.Fatal(err)
			}
			if ok, why := m.Compiled(); !ok {
				t.Fatalf("not compiled: %s", why)
			}
			const n = 24
			chw := oc.shape[0] * oc.shape[1] * oc.shape[2]
			k := m.Classes()
			x, y := randomBatch(rand.New(rand.NewPCG(seed, 2)), n, chw, k)
			// Per-example gradients: the compiled path without clipping on
			// batches of one.
			one, err := m.Engine(clip.Options{NonPrivate: true, MaxBatch: 1})
			if err != nil {
				t.Fatal(err)
			}
			if one.fast == nil {
				t.Fatal("the engine of a compiled model is not batched")
			}
			slow := perExample(t, m, clip.Options{NonPrivate: true, MaxBatch: 1})
			got := make([]float32, m.NumParams())
			want := make([]float32, m.NumParams())
			norms := make([]float64, n)
			for i := range 6 {
				xi := x[i*chw : (i+1)*chw]
				st, err := one.ClippedSum(xi, y[i:i+1], got)
				if err != nil {
					t.Fatal(err)
				}
				l, err := slow.Gradient(xi, y[i], want)
				if err != nil {
					t.Fatal(err)
				}
				if j, ok := close32(got, want); !ok {
					t.Fatalf("example %d: gradient entry %d: compiled %v, per-example %v", i, j, got[max(j, 0)], want[max(j, 0)])
				}
				rl, ref := reference(t, oc, seed, xi, y[i])
				if j, ok := close32(got, ref); !ok {
					t.Fatalf("example %d: gradient entry %d: compiled %v, fresh graph %v", i, j, got[max(j, 0)], ref[max(j, 0)])
				}
				if math.Abs(st.Loss-l) > 1e-5*(1+l) || math.Abs(st.Loss-rl) > 1e-5*(1+rl) {
					t.Fatalf("example %d: loss compiled %v, per-example %v, fresh graph %v", i, st.Loss, l, rl)
				}
			}
			for i := range n {
				if _, err := slow.Gradient(x[i*chw:(i+1)*chw], y[i], want); err != nil {
					t.Fatal(err)
				}
				norms[i], _ = norms2(want)
			}
			// A clip norm between the middle two norms: half the examples
			// clipped, none at the boundary.
			zeta := midNorm(norms)
			opt := clip.Options{Norm: zeta, MaxBatch: n}
			fe, err := m.Engine(opt)
			if err != nil {
				t.Fatal(err)
			}
			se := perExample(t, m, opt)
			fst, err := fe.ClippedSum(x, y, got)
			if err != nil {
				t.Fatal(err)
			}
			sst, err := se.ClippedSum(x, y, want)
			if err != nil {
				t.Fatal(err)
			}
			if j, ok := close32(got, want); !ok {
				t.Fatalf("clipped sum entry %d: compiled %v, per-example %v", j, got[max(j, 0)], want[max(j, 0)])
			}
			if fst.Clipped != sst.Clipped || fst.Clipped == 0 || fst.Clipped == 1 || fst.NonFinite != 0 || sst.NonFinite != 0 {
				t.Fatalf("stats: compiled %+v, per-example %+v (want the same clipped fraction strictly between 0 and 1)", fst, sst)
			}
			for q := range fst.NormQuantiles {
				if math.Abs(fst.NormQuantiles[q]-sst.NormQuantiles[q]) > 1e-5*sst.NormQuantiles[q] {
					t.Fatalf("norm quantile %d: compiled %v, per-example %v", q, fst.NormQuantiles[q], sst.NormQuantiles[q])
				}
			}
			if math.Abs(fst.Loss-sst.Loss) > 1e-5*(1+sst.Loss) {
				t.Fatalf("loss: compiled %v, per-example %v", fst.Loss, sst.Loss)
			}
			// A non-finite example contributes nothing on both paths, and
			// the L-inf rule zeroes the same examples.
			bad := slices.Clone(x)
			bad[3*chw+1] = float32(math.NaN())
			linf := clip.Options{Norm: zeta, MaxBatch: n, LInfZero: linfMid(t, slow, bad, y, chw)}
			fe2, err := m.Engine(linf)
			if err != nil {
				t.Fatal(err)
			}
			fst, err = fe2.ClippedSum(bad, y, got)
			if err != nil {
				t.Fatal(err)
			}
			sst, err = perExample(t, m, linf).ClippedSum(bad, y, want)
			if err != nil {
				t.Fatal(err)
			}
			if j, ok := close32(got, want); !ok {
				t.Fatalf("clipped sum with a NaN example and LInfZero, entry %d: compiled %v, per-example %v", j, got[max(j, 0)], want[max(j, 0)])
			}
			if fst.NonFinite != 1 || sst.NonFinite != 1 || fst.Zeroed != sst.Zeroed || fst.Zeroed == 0 || fst.Clipped != sst.Clipped {
				t.Fatalf("stats with a NaN example and LInfZero: compiled %+v, per-example %+v", fst, sst)
			}
			fl, fa, err := fe.Evaluate(x, y)
			if err != nil {
				t.Fatal(err)
			}
			sl, sa, err := se.Evaluate(x, y)
			if err != nil {
				t.Fatal(err)
			}
			if fa != sa || math.Abs(fl-sl) > 1e-5*(1+sl) {
				t.Fatalf("evaluation: compiled (%v, %v), per-example (%v, %v)", fl, fa, sl, sa)
			}
		})
	}
}

// linfMid is an L-inf threshold between the middle two finite examples'
// gradient L-inf norms of the batch (so that about half are zeroed).
func linfMid(t *testing.T, e *Engine, x []float32, y []int, chw int) float64 {
	t.Helper()
	g := make([]float32, len(e.m.flat))
	var v []float64
	for i := range y {
		l, err := e.Gradient(x[i*chw:(i+1)*chw], y[i], g)
		if err != nil {
			t.Fatal(err)
		}
		if l2, li := norms2(g); !math.IsNaN(l) && !math.IsNaN(l2) {
			v = append(v, li)
		}
	}
	return midNorm(v)
}

// norms2 is g's L2 and L-inf norms in float64.
func norms2(g []float32) (l2, linf float64) {
	for _, v := range g {
		f := float64(v)
		l2 += f * f
		linf = max(linf, math.Abs(f))
	}
	return math.Sqrt(l2), linf
}

func midNorm(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestCompiledTrajectory trains each compiled graph and the same graph on
// the per-example path through train.Run from the same seed (same
// batches, same noise): the parameters agree to float32 rounding after
// every run of 1, 3 and 6 steps, and the user's parameter tensors view
// the trained buffer.
func TestCompiledTrajectory(t *testing.T) {
	for ci, oc := range compileCases {
		t.Run(oc.name, func(t *testing.T) {
			seed := uint64(80 + ci)
			chw := oc.shape[0] * oc.shape[1] * oc.shape[2]
			probe, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(seed, 1))))
			if err != nil {
				t.Fatal(err)
			}
			k := probe.Classes()
			set, err := data.NewDataset(randomData(rand.New(rand.NewPCG(seed, 3)), 120, chw), randomLabels(rand.New(rand.NewPCG(seed, 4)), 120, k),
				data.Shape{C: oc.shape[0], H: oc.shape[1], W: oc.shape[2]}, k)
			if err != nil {
				t.Fatal(err)
			}
			for _, steps := range []int{1, 3, 6} {
				fast, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(seed, 1))))
				if err != nil {
					t.Fatal(err)
				}
				slow, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(seed, 1))))
				if err != nil {
					t.Fatal(err)
				}
				slow.fast = nil // the per-example path
				cfg := train.Config{
					Data:      train.Data{Train: set},
					Privacy:   privacy.Request{Steps: steps, Batch: 20, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 0.5, Accountant: privacy.RDP, ClipNorm: 0.5, Seed: []byte("gorgoniadp compiled trajectory"), InsecureSeed: true},
					Optimizer: train.Optimizer{LearningRate: 0.5},
				}
				a, b := cfg, cfg
				a.Model.Backend, b.Model.Backend = fast, slow
				if _, err := train.Run(context.Background(), a); err != nil {
					t.Fatal(err)
				}
				if _, err := train.Run(context.Background(), b); err != nil {
					t.Fatal(err)
				}
				if j, ok := close32(fast.Params(), slow.Params()); !ok {
					t.Fatalf("%d steps: parameter %d: compiled %v, per-example %v", steps, j, fast.Params()[max(j, 0)], slow.Params()[max(j, 0)])
				}
				if &fast.Tensors()[0].Data().([]float32)[0] != &fast.Params()[0] {
					t.Fatal("parameter tensor does not view the trained buffer")
				}
			}
		})
	}
}

// TestNotCompiled checks that a graph the compiler cannot read stays on
// the per-example path, still trains, and that Compiled names the op
// that kept it there in gorgonia's API words.
func TestNotCompiled(t *testing.T) {
	cases := []struct {
		name, op string
		build    func(g *G.ExprGraph, rng *rand.Rand) Graph
	}{
		{"softplus", "SoftPlus", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 5), G.WithName("x"))
			w1, b1 := param(g, rng, "w1", 0.5, 5, 4), param(g, rng, "b1", 0.1, 4)
			w2, b2 := param(g, rng, "w2", 0.5, 4, 3), param(g, rng, "b2", 0.1, 3)
			h := G.Must(G.Softplus(dense(x, w1, b1)))
			return Graph{Input: x, Logits: dense(h, w2, b2), Params: []*G.Node{w1, b1, w2, b2}}
		}},
		{"mean-loss", "Loss", opCases[3].build},
		{"flat-input-reshaped", "give Graph.Shape {1, 4, 4}", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 16), G.WithName("x"))
			w, b := param(g, rng, "w", 0.4, 9, 2), param(g, rng, "b", 0.1, 2)
			w2, b2 := param(g, rng, "w2", 0.4, 8, 3), param(g, rng, "b2", 0.1, 3)
			c := im2colConv(G.Must(G.Reshape(x, tensor.Shape{1, 1, 4, 4})), w, b, 3, 1, 1, G.Tanh)
			p := G.Must(G.MaxPool2D(c, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
			return Graph{Input: x, Logits: dense(G.Must(G.Reshape(p, tensor.Shape{1, 8})), w2, b2), Params: []*G.Node{w, b, w2, b2}}
		}},
		// Norms other than the built-in layers': eps outside the Sqrt,
		// the unbiased variance, eps 0.
		{"norm-eps-outside-sqrt", "a norm: the denominator is not Sqrt(var + eps)", nearMissNorm(1e-3, "eps-outside")},
		{"norm-unbiased", "a norm: var is not Mean(Square(x - mean))", nearMissNorm(1e-3, "unbiased")},
		{"norm-eps-0", "a norm: with eps 0:", nearMissNorm(0, "")},
		{"shared-weight", "used twice", func(g *G.ExprGraph, rng *rand.Rand) Graph {
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 4), G.WithName("x"))
			w, b1, b2 := param(g, rng, "w", 0.5, 4, 4), param(g, rng, "b1", 0.1, 4), param(g, rng, "b2", 0.1, 4)
			return Graph{Input: x, Logits: dense(G.Must(G.Tanh(dense(x, w, b1))), w, b2), Params: []*G.Node{w, b1, b2}}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gr := c.build(G.NewGraph(), rand.New(rand.NewPCG(3, 1)))
			m, err := New(c.name, gr)
			if err != nil {
				t.Fatal(err)
			}
			ok, why := m.Compiled()
			if ok || !strings.Contains(why, c.op) || strings.Contains(why, "\n") {
				t.Fatalf("Compiled() = %v, %q: want false, one line naming %s", ok, why, c.op)
			}
			t.Log(why)
			e, err := m.Engine(clip.Options{Norm: 1, MaxBatch: 4})
			if err != nil {
				t.Fatal(err)
			}
			if e.fast != nil {
				t.Fatal("batched engine for a graph that was not compiled")
			}
			in := m.InputShape()
			x, y := randomBatch(rand.New(rand.NewPCG(3, 2)), 4, in[0]*in[1]*in[2], m.Classes())
			if _, err := e.ClippedSum(x, y, make([]float32, m.NumParams())); err != nil {
				t.Fatal(err)
			}
			// A run says it once, in one line, on its log.
			if log := runLog(t, m); strings.Count(log, why+"\n") != 1 {
				t.Fatalf("run log %q does not say %q once", log, why)
			}
		})
	}
}

// runLog trains m for one step through train.Run and returns its log.
func runLog(t *testing.T, m *Model) string {
	t.Helper()
	in := m.InputShape()
	chw := in[0] * in[1] * in[2]
	set, err := data.NewDataset(randomData(rand.New(rand.NewPCG(5, 1)), 40, chw), randomLabels(rand.New(rand.NewPCG(5, 2)), 40, m.Classes()),
		data.Shape{C: in[0], H: in[1], W: in[2]}, m.Classes())
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	_, err = train.Run(context.Background(), train.Config{
		Data:      train.Data{Train: set},
		Model:     train.ModelSpec{Backend: m},
		Privacy:   privacy.Request{Steps: 1, Batch: 10, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, Accountant: privacy.RDP, ClipNorm: 1, Seed: []byte("gorgoniadp run log"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 0.1},
		Output:    train.Output{Log: &log},
	})
	if err != nil {
		t.Fatal(err)
	}
	return log.String()
}

// TestCompiledRunSilent checks that the run of a compiled graph says
// nothing of a slow path.
func TestCompiledRunSilent(t *testing.T) {
	m, err := New("mlp", compileCases[0].build(G.NewGraph(), rand.New(rand.NewPCG(1, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if log := runLog(t, m); strings.Contains(log, "gorgoniadp") || log == "" {
		t.Fatalf("run log %q", log)
	}
}

// TestSupportedNames checks that Supported names every accepted op by a
// gorgonia function, not an internal type.
func TestSupportedNames(t *testing.T) {
	got := Supported()
	for _, want := range []string{"Mul", "Add", "HadamardProd", "Tanh", "Sigmoid", "Gte (as in Rectify)", "Im2Col (and Conv2d)", "MaxPool2D", "AveragePool2D", "Reshape", "LogSoftMax", "Sum"} {
		if !slices.Contains(got, want) {
			t.Errorf("Supported() = %q lacks %q", got, want)
		}
	}
	for _, s := range got {
		if s == "" || strings.Contains(s, "Op") || strings.ContainsAny(s, "⊙×÷") {
			t.Errorf("Supported() = %q has an internal name %q", got, s)
		}
	}
}

// TestGivenTwice checks that a graph given to New a second time is
// refused with one line saying so (it used to fail inside gorgonia's
// differentiation with "softmax operator only supports one input").
func TestGivenTwice(t *testing.T) {
	gr := compileCases[0].build(G.NewGraph(), rand.New(rand.NewPCG(1, 1)))
	if _, err := New("first", gr); err != nil {
		t.Fatal(err)
	}
	_, err := New("second", gr)
	if err == nil || !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "given to New already") {
		t.Fatalf("second New: %v", err)
	}
}

// TestClassesMismatch checks that a run refuses a graph with more logits
// than the data has classes (it used to train silently), or fewer.
func TestClassesMismatch(t *testing.T) {
	for _, classes := range []int{3, 6} {
		m, err := New("mlp", compileCases[0].build(G.NewGraph(), rand.New(rand.NewPCG(1, 1)))) // 4 logits
		if err != nil {
			t.Fatal(err)
		}
		set, err := data.NewDataset(randomData(rand.New(rand.NewPCG(5, 1)), 40, 12), randomLabels(rand.New(rand.NewPCG(5, 2)), 40, classes), data.Shape{C: 12, H: 1, W: 1}, classes)
		if err != nil {
			t.Fatal(err)
		}
		_, err = train.Run(context.Background(), train.Config{
			Data:      train.Data{Train: set},
			Model:     train.ModelSpec{Backend: m},
			Privacy:   privacy.Request{Steps: 1, Batch: 10, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, Accountant: privacy.RDP, ClipNorm: 1, Seed: []byte("gorgoniadp classes"), InsecureSeed: true},
			Optimizer: train.Optimizer{LearningRate: 0.1},
		})
		if err == nil || !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "has 4 logits") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("%d classes: %v", classes, err)
		}
	}
}

// mlpAct is compileCases[0] with activation act: the same parameter
// names and shapes, another architecture unless act is Tanh.
func mlpAct(act func(*G.Node) (*G.Node, error)) func(g *G.ExprGraph, rng *rand.Rand) Graph {
	return func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 12), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.6, 12, 8), param(g, rng, "b1", 0.3, 8)
		w2, b2 := param(g, rng, "w2", 0.6, 8, 4), param(g, rng, "b2", 0.3, 4)
		h := G.Must(act(dense(x, w1, b1)))
		return Graph{Input: x, Logits: dense(h, w2, b2), Params: []*G.Node{w1, b1, w2, b2}}
	}
}

// TestDigest checks that the graph digest depends on the architecture,
// not on the parameters' values, that a parameter file of another
// architecture with the same parameter names and shapes is refused
// naming the difference (it loaded before), and that a checkpoint does
// not resume into a changed architecture.
func TestDigest(t *testing.T) {
	build := func(act func(*G.Node) (*G.Node, error), seed uint64) *Model {
		m, err := New("mlp", mlpAct(act)(G.NewGraph(), rand.New(rand.NewPCG(seed, 1))))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, a2, r := build(G.Tanh, 1), build(G.Tanh, 2), build(G.Rectify, 1)
	if a.Digest() != a2.Digest() || len(a.Digest()) != 64 {
		t.Fatalf("digests of one architecture differ: %s, %s", a.Digest(), a2.Digest())
	}
	if a.Digest() == r.Digest() {
		t.Fatal("Tanh and Rectify graphs have one digest")
	}
	var buf bytes.Buffer
	if err := a.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if err := a2.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	err := r.Load(bytes.NewReader(buf.Bytes()))
	if err == nil || !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "another architecture") || !strings.Contains(err.Error(), "Tanh") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("loading a Tanh graph's file into a Rectify graph: %v", err)
	}
	t.Log(err)

	// A checkpoint of the Tanh graph does not resume into the Rectify one.
	set, err := data.NewDataset(randomData(rand.New(rand.NewPCG(5, 1)), 40, 12), randomLabels(rand.New(rand.NewPCG(5, 2)), 40, 4), data.Shape{C: 12, H: 1, W: 1}, 4)
	if err != nil {
		t.Fatal(err)
	}
	cfg := train.Config{
		Data:      train.Data{Train: set},
		Model:     train.ModelSpec{Backend: build(G.Tanh, 3)},
		Privacy:   privacy.Request{Steps: 2, Batch: 10, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, Accountant: privacy.RDP, ClipNorm: 1, Seed: []byte("gorgoniadp digest"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 0.1},
		Output:    train.Output{CheckpointPath: filepath.Join(t.TempDir(), "ck")},
	}
	if _, err := train.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Model.Backend = build(G.Rectify, 3)
	if _, err := train.Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "another architecture") {
		t.Fatalf("resuming into another architecture: %v", err)
	}
	cfg.Model.Backend = build(G.Tanh, 4)
	if res, err := train.Run(context.Background(), cfg); err != nil || res.Resumed != 2 {
		t.Fatalf("resuming into the same architecture: %v", err)
	}
}

// avgPoolGraph is a convolution plus bias, Tanh, AveragePool2D and a
// dense layer (compiled), or with Softplus in place of Tanh (not).
// (on an hw x hw input; hw odd: the windows do not tile the activation).
func avgPoolGraph(act func(*G.Node) (*G.Node, error), hw int) func(g *G.ExprGraph, rng *rand.Rand) Graph {
	return func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, hw, hw), G.WithName("x"))
		k, kb := param(g, rng, "k", 0.5, 3, 2, 3, 3), param(g, rng, "kb", 0.2, 1, 3, 1, 1)
		f := 3 * (hw / 2) * (hw / 2)
		w, b := param(g, rng, "w", 0.5, f, 3), param(g, rng, "b", 0.2, 3)
		c := G.Must(G.Conv2d(x, k, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1})) // (1, 3, hw, hw)
		h := G.Must(act(G.Must(G.BroadcastAdd(c, kb, nil, []byte{0, 2, 3}))))
		a := G.Must(G.AveragePool2D(h, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
		return Graph{Input: x, Logits: dense(G.Must(G.Reshape(a, tensor.Shape{1, f})), w, b), Params: []*G.Node{k, kb, w, b}}
	}
}

// TestAveragePool2D checks a compiled AveragePool2D against central
// differences of the loss in float64 (the forward pass is gorgonia's, on
// the per-example path): every gradient entry within 1e-3 absolute plus
// 1e-2 relative (h = 1e-2 on float32 parameters). gorgonia's own
// gradient of AveragePool2D is wrong (most entries disagree; the
// per-example path trained with it before), so a graph with
// AveragePool2D that does not compile is refused.
func TestAveragePool2D(t *testing.T) {
	m, err := New("avgpool", avgPoolGraph(G.Tanh, 4)(G.NewGraph(), rand.New(rand.NewPCG(3, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := m.Compiled(); !ok {
		t.Fatal(why)
	}
	e, err := m.Engine(clip.Options{Norm: 1, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	fwd := perExample(t, m, clip.Options{Norm: 1, MaxBatch: 1})
	x, y := randomBatch(rand.New(rand.NewPCG(3, 2)), 2, 32, 3)
	got := make([]float32, m.NumParams())
	wrong := 0
	for i := range 2 {
		xi := x[i*32 : (i+1)*32]
		if _, err := e.Gradient(xi, y[i], got); err != nil {
			t.Fatal(err)
		}
		slow := make([]float32, m.NumParams())
		if _, err := m.gradient(xi, y[i]); err != nil {
			t.Fatal(err)
		}
		copy(slow, m.gbuf)
		for j := range m.flat {
			num := centralDifference(t, m, fwd, xi, y[i], j, 1e-2)
			if d := math.Abs(num - float64(got[j])); d > 1e-3+1e-2*math.Abs(num) {
				t.Fatalf("example %d, parameter %d: compiled %v, central difference %v", i, j, got[j], num)
			}
			if d := math.Abs(num - float64(slow[j])); d > 1e-3+1e-2*math.Abs(num) {
				wrong++
			}
		}
	}
	t.Logf("gorgonia's own gradient: %d of %d entries wrong", wrong, 2*m.NumParams())
	if wrong == 0 {
		t.Fatal("gorgonia's AveragePool2D gradient is right now: the per-example path may accept AveragePool2D again")
	}
	for _, c := range []struct {
		name, why string
		act       func(*G.Node) (*G.Node, error)
		hw        int
	}{{"softplus", "SoftPlus", G.Softplus, 4}, {"odd", "windows that tile", G.Tanh, 5}} {
		_, err = New("avgpool-"+c.name, avgPoolGraph(c.act, c.hw)(G.NewGraph(), rand.New(rand.NewPCG(3, 1))))
		if err == nil || !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "AveragePool2D has a wrong gradient") || !strings.Contains(err.Error(), c.why) {
			t.Fatalf("an AveragePool2D graph that does not compile (%s): %v", c.name, err)
		}
		t.Log(err)
	}
}

// TestNaNInputPerExample checks that an example with a NaN input counts as
// non-finite on the per-example path through MaxPool2D (gorgonia's
// MaxPool2D gradient indexed out of range on it, in a goroutine, which
// ended the program).
func TestNaNInputPerExample(t *testing.T) {
	oc := opCases[1] // Conv2d without a bias, Tanh, MaxPool2D
	m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(1, 1))))
	if err != nil {
		t.Fatal(err)
	}
	e := perExample(t, m, clip.Options{Norm: 1, MaxBatch: 4})
	chw := 2 * 6 * 6
	x, y := randomBatch(rand.New(rand.NewPCG(1, 2)), 4, chw, 4)
	x[chw+5] = float32(math.NaN())
	x[2*chw+7] = float32(math.Inf(1))
	st, err := e.ClippedSum(x, y, make([]float32, m.NumParams()))
	if err != nil || st.NonFinite != 2 {
		t.Fatalf("stats %+v, error %v: want 2 non-finite examples", st, err)
	}
	g := make([]float32, m.NumParams())
	if l, err := e.Gradient(x[chw:2*chw], y[1], g); err != nil || !math.IsNaN(l) || !math.IsNaN(float64(g[0])) {
		t.Fatalf("gradient of a NaN example: loss %v, g[0] %v, error %v", l, g[0], err)
	}
}

// TestProbe checks that New's probe example catches compiled layers that
// compute another function than the graph (here Rectify read as Tanh),
// and passes the right ones.
func TestProbe(t *testing.T) {
	m, err := New("mlp", compileCases[0].build(G.NewGraph(), rand.New(rand.NewPCG(1, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if nc := m.probe(m.fast); nc != nil {
		t.Fatalf("the right layers: %v", nc)
	}
	wrong := *m.fast
	wrong.net.Layers = slices.Clone(wrong.net.Layers)
	d := wrong.net.Layers[0].(nn.Dense)
	d.Act = nn.ReLU
	wrong.net.Layers[0] = d
	if nc := m.probe(&wrong); nc == nil || !strings.Contains(nc.Error(), "disagree with the graph") {
		t.Fatalf("layers with ReLU for Tanh: %v", nc)
	}
}

// dropoutGraph is dense, Tanh, Dropout(rate) (none for rate < 0), dense,
// act after the first layer (Tanh compiles, Softplus does not).
func dropoutGraph(rate float64, act func(*G.Node) (*G.Node, error)) func(g *G.ExprGraph, rng *rand.Rand) Graph {
	return func(g *G.ExprGraph, rng *rand.Rand) Graph {
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 10), G.WithName("x"))
		w1, b1 := param(g, rng, "w1", 0.6, 10, 16), param(g, rng, "b1", 0.3, 16)
		w2, b2 := param(g, rng, "w2", 0.6, 16, 3), param(g, rng, "b2", 0.3, 3)
		h := G.Must(act(dense(x, w1, b1)))
		if rate >= 0 {
			h = G.Must(G.Dropout(h, rate))
		}
		return Graph{Input: x, Logits: dense(h, w2, b2), Params: []*G.Node{w1, b1, w2, b2}}
	}
}

// TestDropout checks that gorgonia's Dropout compiles to the built-in
// layer (nn.Dropout of the same rate; its per-example keyed masks are
// tested in package nn, TestDropout there): evaluation and the probe pass
// activations through (equal to the graph without Dropout), training
// steps drop (the clipped sum differs from the graph's without Dropout,
// and equals the built-in executor's on the same layers), rate 0 adds no
// layer, and a graph with Dropout that does not compile is refused.
func TestDropout(t *testing.T) {
	build := func(rate float64, act func(*G.Node) (*G.Node, error)) (*Model, error) {
		return New("dropout", dropoutGraph(rate, act)(G.NewGraph(), rand.New(rand.NewPCG(4, 1))))
	}
	m, err := build(0.3, G.Tanh)
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := m.Compiled(); !ok {
		t.Fatal(why)
	}
	var drop nn.Dropout
	for _, l := range m.fast.net.Layers {
		if d, ok := l.(nn.Dropout); ok {
			drop = d
		}
	}
	if drop.Rate != 0.3 || drop.Seed == 0 {
		t.Fatalf("dropout layer %+v, want rate 0.3 and a seed", drop)
	}
	plain, err := build(-1, G.Tanh)
	if err != nil {
		t.Fatal(err)
	}
	zero, err := build(0, G.Tanh)
	if err != nil {
		t.Fatal(err)
	}
	if len(zero.fast.net.Layers) != len(plain.fast.net.Layers) {
		t.Fatalf("rate 0: layers %v, want those without Dropout %v", zero.fast.net.Layers, plain.fast.net.Layers)
	}
	const n = 16
	x, y := randomBatch(rand.New(rand.NewPCG(4, 2)), n, 10, 3)
	opt := clip.Options{Norm: 0.5, MaxBatch: n}
	sum := func(m *Model) ([]float32, float64) {
		e, err := m.Engine(opt)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float32, m.NumParams())
		if _, err := e.ClippedSum(x, y, out); err != nil {
			t.Fatal(err)
		}
		l, _, err := e.Evaluate(x, y)
		if err != nil {
			t.Fatal(err)
		}
		return out, l
	}
	got, gl := sum(m)
	want, wl := sum(plain)
	if _, same := close32(got, want); same {
		t.Fatal("training step with Dropout equals the one without")
	}
	if math.Abs(gl-wl) > 1e-5*(1+wl) {
		t.Fatalf("evaluation loss with Dropout %v, without %v: want equal (no dropping)", gl, wl)
	}
	// The built-in executor on the same layers and parameters.
	ne, err := clip.New(m.fast, opt)
	if err != nil {
		t.Fatal(err)
	}
	ref := make([]float32, m.NumParams())
	if _, err := ne.ClippedSum(x, y, ref); err != nil {
		t.Fatal(err)
	}
	if j, ok := close32(got, ref); !ok {
		t.Fatalf("clipped sum entry %d: %v, the executor's %v", j, got[max(j, 0)], ref[max(j, 0)])
	}
	if _, err := build(0.3, G.Softplus); err == nil || !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "Dropout") || !strings.Contains(err.Error(), "SoftPlus") {
		t.Fatalf("Dropout in a graph that does not compile: %v", err)
	}
}
