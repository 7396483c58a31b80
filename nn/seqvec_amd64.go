//go:build amd64 && !purego

package nn

import "math"

//go:noescape
func expShiftAVX2(z, dst *float32, sh float32, n int) float64

//go:noescape
func geluGradAVX2(z, th, dy *float32, n int)

//go:noescape
func maxAVX2(v *float32, n int) float32

//go:noescape
func scaleAVX2(v *float32, a float32, n int)

// maxOf is the largest entry of v (len(v) > 0), eight at a time with
// AVX2; with a NaN entry the result is NaN or the largest of the others.
func maxOf(v []float32) float32 {
	n := 0
	if hasAVX2FMA {
		n = len(v) &^ 7
	}
	mx := float32(math.Inf(-1))
	if n > 0 {
		mx = maxAVX2(&v[0], n)
	}
	for _, x := range v[n:] {
		mx = max(mx, x)
	}
	return mx
}

// expShift sets g[j] = exp(z[j] - shift) (len(g) >= len(z)) and returns
// their sum in float64, eight at a time with AVX2 (Cephes' expf
// polynomial in float32: within 2 units in the last place; 0 below
// exp(-87)), the rest with expShiftGo.
func expShift(z, g []float32, shift float32) float64 {
	n := 0
	if hasAVX2FMA {
		n = len(z) &^ 7
	}
	s := 0.0
	if n > 0 {
		s = expShiftAVX2(&z[0], &g[0], shift, n)
	}
	return s + expShiftGo(z[n:], g[n:len(z)], shift)
}

// scaleBy multiplies v by a, eight at a time with AVX2.
func scaleBy(v []float32, a float32) {
	n := 0
	if hasAVX2FMA {
		if n = len(v) &^ 7; n > 0 {
			scaleAVX2(&v[0], a, n)
		}
	}
	for k := range v[n:] {
		v[n+k] *= a
	}
}

// geluGradTanh multiplies dy by the derivative of the tanh-approximated
// GELU at z, given th = its tanh: eight at a time with AVX2 in float32,
// the rest with geluGradTanhGo in float64.
func geluGradTanh(z, th, dy []float32) {
	n := 0
	if hasAVX2FMA {
		if n = len(dy) &^ 7; n > 0 {
			geluGradAVX2(&z[0], &th[0], &dy[0], n)
		}
	}
	geluGradTanhGo(z[n:len(dy)], th[n:len(dy)], dy[n:])
}
