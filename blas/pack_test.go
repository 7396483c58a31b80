package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackBRows: packB of a row-major B (the vector row copy for whole
// panels of 64 or 128 bytes, the loop otherwise) gives each panel's rows
// as B holds them, bit for bit (NaN payloads included), zero-padded past
// the last column, for panel widths of every kernel and ragged edges.
func TestPackBRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(91, 92))
	testPackBRows(t, rng, func(x float64) float32 { return float32(x) }, func(v float32) uint64 { return uint64(math.Float32bits(v)) })
	testPackBRows(t, rng, func(x float64) float64 { return x }, math.Float64bits)
}

func testPackBRows[T float32 | float64](t *testing.T, rng *rand.Rand, conv func(float64) T, bits func(T) uint64) {
	t.Helper()
	for _, nr := range []int{4, 8, 16, 32} {
		for _, kc := range []int{1, 2, 7, 33} {
			for _, nc := range []int{nr, 2 * nr, 2*nr + 3, nr - 1} {
				if nc < 1 {
					continue
				}
				ldb, pc, jc := nc+5, 2, 3
				b := make([]T, (pc+kc)*ldb+jc+nc)
				for k := range b {
					b[k] = conv(rng.NormFloat64())
					if rng.IntN(16) == 0 {
						b[k] = conv(math.NaN())
					}
				}
				panels := (nc + nr - 1) / nr
				dst := make([]T, panels*nr*kc)
				for k := range dst {
					dst[k] = conv(7)
				}
				packB(dst, b, ldb, false, pc, jc, kc, nc, nr, 1)
				for jr := 0; jr < nc; jr += nr {
					for p := range kc {
						for j := range nr {
							want := conv(0)
							if jr+j < nc {
								want = b[(pc+p)*ldb+jc+jr+j]
							}
							if got := dst[jr*kc+p*nr+j]; bits(got) != bits(want) {
								t.Fatalf("nr %d kc %d nc %d: panel %d row %d col %d = %v, want %v", nr, kc, nc, jr/nr, p, j, got, want)
							}
						}
					}
				}
			}
		}
	}
}
