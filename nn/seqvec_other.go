//go:build !amd64 || purego

package nn

import "math"

// maxOf is the largest entry of v (len(v) > 0); with a NaN entry the
// result is NaN or the largest of the others.
func maxOf(v []float32) float32 {
	mx := float32(math.Inf(-1))
	for _, x := range v {
		mx = max(mx, x)
	}
	return mx
}

// expShift sets g[j] = exp(z[j] - shift) (len(g) >= len(z)) and returns
// their sum in float64.
func expShift(z, g []float32, shift float32) float64 {
	return expShiftGo(z, g[:len(z)], shift)
}

// scaleBy multiplies v by a.
func scaleBy(v []float32, a float32) {
	for k := range v {
		v[k] *= a
	}
}

// geluGradTanh multiplies dy by the derivative of the tanh-approximated
// GELU at z, given th = its tanh.
func geluGradTanh(z, th, dy []float32) { geluGradTanhGo(z, th, dy) }
