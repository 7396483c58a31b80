package gorgoniadp

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestFormatParams3258d09: a parameter file written by SaveFile at commit
// 3258d09 (opCases[1], initialized with PCG(5, 1)) loads into the same
// graph initialized otherwise, bit for bit.
func TestFormatParams3258d09(t *testing.T) {
	oc := opCases[1]
	want, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(5, 1))))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(77, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadFile(filepath.Join("testdata", "formats", "params-3258d09.dpmf")); err != nil {
		t.Fatal(err)
	}
	for i, v := range want.Params() {
		if math.Float32bits(m.Params()[i]) != math.Float32bits(v) {
			t.Fatalf("parameter %d: %v, saved %v", i, m.Params()[i], v)
		}
	}
}

// TestFormatParamsad4368a: a parameter file with the graph's architecture
// (Model.Digest), written by SaveFile at commit ad4368a (opCases[1],
// PCG(5, 1)), loads into the same graph bit for bit, so the
// architecture's description is stable, and is refused by a graph of
// another architecture with the same parameters (Sigmoid for Tanh).
func TestFormatParamsad4368a(t *testing.T) {
	oc := opCases[1]
	path := filepath.Join("testdata", "formats", "params-ad4368a.dpmf")
	want, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(5, 1))))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(77, 1))))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	for i, v := range want.Params() {
		if math.Float32bits(m.Params()[i]) != math.Float32bits(v) {
			t.Fatalf("parameter %d: %v, saved %v", i, m.Params()[i], v)
		}
	}
	g := G.NewGraph()
	rng := rand.New(rand.NewPCG(5, 1))
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 2, 6, 6), G.WithName("x"))
	k := param(g, rng, "k", 0.4, 3, 2, 3, 3)
	w, b := param(g, rng, "w", 0.3, 27, 4), param(g, rng, "b", 0.1, 4)
	c := G.Must(G.Sigmoid(G.Must(G.Conv2d(x, k, tensor.Shape{3, 3}, []int{1, 1}, []int{1, 1}, []int{1, 1}))))
	p := G.Must(G.MaxPool2D(c, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
	other, err := New("other", Graph{Input: x, Logits: dense(G.Must(G.Reshape(p, tensor.Shape{1, 27})), w, b), Params: []*G.Node{k, w, b}})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.LoadFile(path); err == nil || !strings.Contains(err.Error(), "another architecture") {
		t.Fatalf("a Sigmoid graph loading a Tanh graph's file: %v", err)
	}
}
