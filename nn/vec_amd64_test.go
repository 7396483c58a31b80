//go:build amd64 && !purego

package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// biasTanhOne is biasTanh's value for one entry as its AVX2 kernel
// computes it (tanh32's without AVX2), for tests of the other widths.
func biasTanhOne(z, bias float32) float32 {
	if !hasAVX2FMA {
		return tanh32(z + bias)
	}
	var d, zv, bv [8]float32
	zv[0], bv[0] = z, bias
	biasTanhAVX2(&d[0], &zv[0], &bv[0], 8)
	return d[0]
}

// TestSumsqLanesKernels checks both sumsq64 kernels the machine has (the
// AVX2 one also on AVX-512 machines, which use the other) against addGo
// partial sum by partial sum, bit for bit: every multiple of 16 up to 640
// and some large ones, from partial sums already holding values (the
// kernels load and store them), with NaN and infinities.
func TestSumsqLanesKernels(t *testing.T) {
	kernels := map[string]func(*[32]float64, *float32, int){}
	if hasAVX2FMA {
		kernels["avx2"] = sumsqLanesAVX2
	}
	if hasAVX512 {
		kernels["avx512"] = sumsqLanesAVX512
	}
	if len(kernels) == 0 {
		t.Skip("skipped because this machine has no AVX2 kernels to compare with the portable loops")
	}
	rng := rand.New(rand.NewPCG(35, 36))
	lengths := []int{4096, 4096 + 16, 4096 + 32, 4096 + 48, 65536 + 16}
	for n := 16; n <= 640; n += 16 {
		lengths = append(lengths, n)
	}
	for name, kernel := range kernels {
		for _, n := range lengths {
			for _, bad := range []float64{0, math.NaN(), math.Inf(1), math.Inf(-1)} {
				v := randVec(rng, n, 1e3)
				v[rng.IntN(n)] *= 1e-42
				v[rng.IntN(n)] = 3e38
				if bad != 0 {
					v[rng.IntN(n)] = float32(bad)
				}
				var want sumsqLanes
				for l := range want.s {
					want.s[l] = rng.Float64() * 1e6
				}
				got := want.s
				want.addGo(v)
				kernel(&got, &v[0], n)
				for l := range got {
					if !sameFloat(got[l], want.s[l]) {
						t.Fatalf("%s n=%d: partial sum %d = %v, portable %v", name, n, l, got[l], want.s[l])
					}
				}
			}
		}
	}
}
