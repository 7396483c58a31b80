package gorgoniadp

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	G "gorgonia.org/gorgonia"
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
