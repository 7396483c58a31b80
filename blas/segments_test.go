package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
)

// A multi-segment product gives, bit for bit, the sequence of
// single-segment products it replaces (the first with beta, the others
// adding), with every kernel of the machine: depths within and over one
// kc block, ragged row panels, edge column blocks, more than one nc
// block, segments of different depths and empty ones, beta 0 over NaN.
func TestSgemmPackedSegments(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	type shape struct {
		m, n, lda int
		ks        []int
		step      int // offset between segments' first rows
	}
	shapes := []shape{
		{1092, 32, 32, []int{96, 96, 96}, 34 * 32},
		{84, 128, 128, []int{384, 384, 384}, 10 * 128},
		{1094, 32, 3, []int{9, 9, 9}, 34 * 3},
		{288, 64, 64, []int{192, 192, 192}, 18 * 64},
		{29, 70, 5, []int{20, 20}, 17},
		{13, 4100, 3, []int{7, 7}, 50},
		{30, 40, 6, []int{5, 300, 0, 11}, 23},
		{30, 40, 6, []int{0, 12}, 23},
		{5, 3, 2, []int{4}, 0},
	}
	var s Serial32
	for _, kern := range kernels32() {
		for _, sh := range shapes {
			nseg := len(sh.ks)
			offs := make([]int, nseg)
			need := 0
			pb := make([]PackedB32, nseg)
			for k := range nseg {
				offs[k] = k * sh.step
				need = max(need, offs[k]+(sh.m-1)*sh.lda+sh.ks[k])
				w := make([]float32, sh.ks[k]*sh.n)
				for i := range w {
					w[i] = float32(rng.NormFloat64())
				}
				pb[k].p.pack(kern, gblas.NoTrans, sh.ks[k], sh.n, 1, w, sh.n)
			}
			a := make([]float32, need)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			for _, beta := range []float32{0, 1, 0.5} {
				c0 := make([]float32, sh.m*sh.n+3)
				for i := range c0 {
					c0[i] = float32(rng.NormFloat64())
				}
				if beta == 0 {
					c0[7] = float32(math.NaN())
				}
				want := append([]float32(nil), c0...)
				for k := range nseg {
					bk := float32(1)
					if k == 0 {
						bk = beta
					}
					s.SgemmPackedOverlapA(gblas.NoTrans, sh.m, a[offs[k]:], sh.lda, &pb[k], bk, want, sh.n)
				}
				got := append([]float32(nil), c0...)
				s.SgemmPackedSegments(sh.m, a, sh.lda, offs, pb, beta, got, sh.n)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s %v beta %v: c[%d] = %v, want %v bit for bit", kern.name, sh, beta, i, got[i], want[i])
					}
				}
			}
			c := make([]float32, sh.m*sh.n)
			if al := testing.AllocsPerRun(3, func() {
				s.SgemmPackedSegments(sh.m, a, sh.lda, offs, pb, 1, c, sh.n)
			}); al != 0 {
				t.Errorf("%s %v: %v allocations per call", kern.name, sh, al)
			}
		}
	}
}

// SgemmPackedSegments panics on arguments that do not describe a product.
func TestSgemmPackedSegmentsPanics(t *testing.T) {
	var pb [2]PackedB32
	PackB32(gblas.NoTrans, 4, 3, 1, make([]float32, 12), 3, &pb[0])
	PackB32(gblas.NoTrans, 4, 2, 1, make([]float32, 8), 2, &pb[1])
	var s Serial32
	for name, f := range map[string]func(){
		"count":  func() { s.SgemmPackedSegments(2, make([]float32, 20), 2, []int{0}, pb[:], 0, make([]float32, 6), 3) },
		"empty":  func() { s.SgemmPackedSegments(2, make([]float32, 20), 2, nil, nil, 0, make([]float32, 6), 3) },
		"widths": func() { s.SgemmPackedSegments(2, make([]float32, 20), 2, []int{0, 1}, pb[:], 0, make([]float32, 6), 3) },
		"offset": func() { s.SgemmPackedSegments(2, make([]float32, 20), 2, []int{-1}, pb[:1], 0, make([]float32, 6), 3) },
		"shortA": func() { s.SgemmPackedSegments(2, make([]float32, 20), 2, []int{15}, pb[:1], 0, make([]float32, 6), 3) },
		"shortC": func() { s.SgemmPackedSegments(2, make([]float32, 20), 2, []int{0}, pb[:1], 0, make([]float32, 5), 3) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
