package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TowardZero32 returns the float32 of largest magnitude not above |v|, of
// v's sign, across the whole float64 range that matters: subnormal
// float32 results, normal ones, and values beyond the float32 maximum
// (which give the maximum).
func TestTowardZero32(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 10))
	for i := range 200000 {
		// Exponents from below the smallest subnormal float32 to above
		// the float32 maximum.
		v := math.Ldexp(1+rng.Float64(), -160+rng.IntN(300))
		if i%2 == 1 {
			v = -v
		}
		r := TowardZero32(v)
		a, ar := math.Abs(v), math.Abs(float64(r))
		if ar > a || math.IsInf(float64(r), 0) {
			t.Fatalf("TowardZero32(%g) = %g: larger in magnitude", v, r)
		}
		if r != 0 && math.Signbit(float64(r)) != math.Signbit(v) {
			t.Fatalf("TowardZero32(%g) = %g: wrong sign", v, r)
		}
		if up := math.Nextafter32(float32(math.Abs(float64(r))), float32(math.Inf(1))); ar < math.MaxFloat32 && float64(up) <= a {
			t.Fatalf("TowardZero32(%g) = %g: %g is closer and not larger", v, r, up)
		}
	}
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -1, math.MaxFloat32, math.SmallestNonzeroFloat32} {
		if r := TowardZero32(v); float64(r) != v {
			t.Errorf("TowardZero32(%g) = %g, want it exactly", v, r)
		}
	}
}

// MulDown(Factor32(c), x) is within c|x|(1+2^-24)^2 for every x, and
// never subnormal: factors and entries across the whole float32 range,
// most products landing near or in the subnormal range (where rounding
// to nearest alone lifted clipped norms above the clip norm).
func TestMulDown(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 11))
	for range 500000 {
		c := math.Ldexp(1+rng.Float64(), -1-rng.IntN(160))
		x := float32(math.Ldexp(1+rng.Float64(), -149+rng.IntN(276)))
		if rng.IntN(2) == 0 {
			x = -x
		}
		p := MulDown(Factor32(c), x)
		if a := math.Abs(float64(p)); a > c*math.Abs(float64(x))*(1+0x1p-24)*(1+0x1p-24) || a != 0 && a < 0x1p-126 {
			t.Fatalf("MulDown(%g, %g) = %g: above %g or subnormal", c, x, p, c*math.Abs(float64(x)))
		}
	}
}
