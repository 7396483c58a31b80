package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
)

// TestPackedStorage checks PackedLen32 against the packed length, and
// that a PackedB32 packed into storage of its caller's (SetStorage)
// uses it when it is long enough, allocates when it is not, and gives
// products with the bits of one packed into its own storage.
func TestPackedStorage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var s Serial32
	for _, sh := range [][4]int{{1, 1, 0, 0}, {7, 5, 0, 0}, {300, 40, 0, 0}, {1100, 70, 0, 0}, {600, 33, 34, 32}, {1088, 32, 34, 32}, {45, 17, 9, 3}} {
		k, n, period, keep := sh[0], sh[1], sh[2], sh[3]
		b := make([]float32, k*n)
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		for i := range k {
			if period > 0 && i%period >= keep {
				for j := range n {
					b[i*n+j] = 0
				}
			}
		}
		pack := func(dst *PackedB32) {
			if period == 0 {
				PackB32(gblas.NoTrans, k, n, 1, b, n, dst)
			} else {
				PackB32Runs(k, n, period, keep, 1, b, n, dst)
			}
		}
		var own PackedB32
		pack(&own)
		want := PackedLen32(k, n, period, keep)
		if own.Len() != want {
			t.Fatalf("%v: packed %d floats, PackedLen32 %d", sh, own.Len(), want)
		}
		for _, extra := range []int{0, 5, -1} {
			if want+extra < 0 {
				continue
			}
			store := make([]float32, want+extra)
			var on PackedB32
			on.SetStorage(store)
			pack(&on)
			inStore := want > 0 && &on.p.data[0] == &store[0]
			if inStore != (extra >= 0 && want > 0) {
				t.Errorf("%v, storage of %d floats for %d: used %v", sh, want+extra, want, inStore)
			}
			m := 13
			a := make([]float32, m*k)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			c0, c1 := make([]float32, m*n), make([]float32, m*n)
			s.SgemmPacked(gblas.NoTrans, m, a, k, &own, 0, c0, n)
			s.SgemmPacked(gblas.NoTrans, m, a, k, &on, 0, c1, n)
			for i := range c0 {
				if math.Float32bits(c0[i]) != math.Float32bits(c1[i]) {
					t.Fatalf("%v: entry %d %g, want %g", sh, i, c1[i], c0[i])
				}
			}
		}
	}
}
