package gorgoniadp

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// normMapCase (in compileCases): gorgonia's Conv2d with a channel bias
// and Tanh, GroupNorm (2 groups of 2 channels) with Rectify, MaxPool2D,
// a convolution in the built-in layout, LayerNorm over its (1, C, H, W)
// map with Tanh, a dense layer.
var normMapCase = opCase{"cnn-groupnorm-layernorm", [3]int{2, 6, 6}, func(g *G.ExprGraph, rng *rand.Rand) Graph {
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, 6, 6), G.WithName("x"))
	k1, b1 := param(g, rng, "k1", 0.4, 4, 2, 3, 3), param(g, rng, "b1", 0.2, 1, 4, 1, 1)
	g1, be1 := param(g, rng, "g1", 0.8, 4), param(g, rng, "be1", 0.3, 1, 4, 1, 1)
	w2, b2 := param(g, rng, "w2", 0.4, 16, 3), param(g, rng, "b2", 0.2, 3)
	g2, be2 := param(g, rng, "g2", 0.8, 1, 3, 2, 2), param(g, rng, "be2", 0.3, 1, 3, 2, 2)
	w, b := param(g, rng, "w", 0.5, 12, 3), param(g, rng, "b", 0.2, 3)
	c1 := G.Must(G.Conv2d(x, k1, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1})) // (1, 4, 6, 6)
	c1 = G.Must(G.BroadcastAdd(c1, b1, nil, []byte{0, 2, 3}))
	h1 := G.Must(G.Rectify(G.Must(GroupNorm(G.Must(G.Tanh(c1)), 2, g1, be1, 1e-5))))
	p1 := G.Must(G.MaxPool2D(h1, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2})) // (1, 4, 3, 3)
	c2 := im2colConv(p1, w2, b2, 2, 1, 0, nil)                                  // (1, 3, 2, 2)
	h2 := G.Must(G.Tanh(G.Must(LayerNorm(c2, g2, be2, 1e-4))))
	return Graph{Input: x, Logits: dense(G.Must(G.Reshape(h2, tensor.Shape{1, 12})), w, b), Params: []*G.Node{k1, b1, g1, be1, w2, b2, g2, be2, w, b}}
}}

// TestNormMaps checks that GroupNorm and LayerNorm over a feature map
// compile to nn.GroupNorm and nn.LayerNorm with the graph's groups, eps
// and activation, and that the compiled gradient and gorgonia's own
// (the per-example path's) equal central differences of the graph's
// forward pass, 1e-3 absolute + 1e-2 relative (float32 forward, step
// 1e-3). With the division (x - mean) / Sqrt(var + eps) reshaped back to
// the map, gorgonia v0.9.18's gradient was wrong in 229 of 396 entries,
// and with Sub(x, mean) after the Tanh in 150 of 396 (its Reshape shares
// data; normalize adds -mean and multiplies by the inverse).
func TestNormMaps(t *testing.T) {
	oc := normMapCase
	m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(3, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := m.Compiled(); !ok {
		t.Fatal(why)
	}
	net := m.fast.Network()
	var kinds []string
	for _, l := range net.Layers {
		switch l := l.(type) {
		case nn.GroupNorm:
			kinds = append(kinds, "groupnorm")
			if l.Groups != 2 || l.Eps != float64(float32(1e-5)) || l.Act != nn.ReLU {
				t.Fatalf("GroupNorm layer %+v", l)
			}
		case nn.LayerNorm:
			kinds = append(kinds, "layernorm")
			if l.Eps != float64(float32(1e-4)) || l.Act != nn.Tanh {
				t.Fatalf("LayerNorm layer %+v", l)
			}
		}
	}
	if strings.Join(kinds, ",") != "groupnorm,layernorm" {
		t.Fatalf("norm layers %v", kinds)
	}
	e, err := m.Engine(clip.Options{Norm: 1, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	fwd := perExample(t, m, clip.Options{Norm: 1, MaxBatch: 1})
	chw := oc.shape[0] * oc.shape[1] * oc.shape[2]
	x, y := randomBatch(rand.New(rand.NewPCG(3, 2)), 2, chw, m.Classes())
	got := make([]float32, m.NumParams())
	wrong := 0
	for i := range 2 {
		xi := x[i*chw : (i+1)*chw]
		if _, err := e.Gradient(xi, y[i], got); err != nil {
			t.Fatal(err)
		}
		for j := range m.flat {
			num := centralDifference(t, m, fwd, xi, y[i], j, 1e-3)
			if d := math.Abs(num - float64(got[j])); d > 1e-3+1e-2*math.Abs(num) {
				t.Fatalf("example %d, parameter %d: compiled %v, central difference %v", i, j, got[j], num)
			}
		}
		// gorgonia's own gradient, last: its pass may write into the
		// parameters.
		saved := append([]float32(nil), m.flat...)
		if _, err := m.gradient(xi, y[i]); err != nil {
			t.Fatal(err)
		}
		for j := range saved {
			if saved[j] != m.flat[j] {
				t.Fatalf("gorgonia's pass changed parameter %d: %v to %v", j, saved[j], m.flat[j])
			}
		}
		for j := range got {
			if d := math.Abs(float64(m.gbuf[j] - got[j])); d > 1e-3+1e-2*math.Abs(float64(got[j])) {
				wrong++
			}
		}
		copy(m.flat, saved)
	}
	if wrong > 0 {
		t.Fatalf("gorgonia's own gradient: %d of %d entries off the compiled one", wrong, 2*m.NumParams())
	}
}

// TestNormHelpersRefuse checks the helpers' one-line errors for
// arguments the built-in layers cannot take.
func TestNormHelpersRefuse(t *testing.T) {
	g := G.NewGraph()
	rng := rand.New(rand.NewPCG(1, 1))
	m := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 4, 2, 2), G.WithName("m"))
	v := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 6), G.WithName("v"))
	c4, c3 := param(g, rng, "c4", 1, 4), param(g, rng, "c3", 1, 3)
	f6, f16 := param(g, rng, "f6", 1, 1, 6), param(g, rng, "f16", 1, 16)
	for _, c := range []struct {
		name, want string
		err        error
	}{
		{"groups", "3 groups do not divide 4 channels", func() error { _, err := GroupNorm(m, 3, c4, c4, 1e-5); return err }()},
		{"gamma", "want 4 values each", func() error { _, err := GroupNorm(m, 2, c3, c4, 1e-5); return err }()},
		{"map", "want (1, C, H, W)", func() error { _, err := GroupNorm(v, 1, f6, f6, 1e-5); return err }()},
		{"eps", "want eps > 0", func() error { _, err := LayerNorm(v, f6, f6, 0); return err }()},
		{"shape", "give both x's shape", func() error { _, err := LayerNorm(m, f16, f16, 1e-5); return err }()},
	} {
		if c.err == nil || !errors.Is(c.err, dpcore.ErrInvalid) || !strings.Contains(c.err.Error(), c.want) || strings.Contains(c.err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", c.name, c.err, c.want)
		}
	}
}
