package nn

import "math"

// expShiftGo is expShift one at a time: exp(z[j] - shift) in float64,
// rounded to float32, 0 below exp(-87) as the vector version.
func expShiftGo(z, g []float32, shift float32) float64 {
	s := 0.0
	for k, v := range z {
		x := v - shift
		e := float32(0)
		if !(x < -87) {
			e = float32(math.Exp(float64(x)))
		}
		g[k] = e
		s += float64(e)
	}
	return s
}

// geluGradTanhGo is geluGradTanh one at a time in float64.
func geluGradTanhGo(z, th, dy []float32) {
	for k, v := range dy {
		x := float64(z[k])
		t := float64(th[k])
		d := 0.5*(1+t) + 0.5*x*(1-t*t)*geluC*(1+3*0.044715*x*x)
		dy[k] = float32(float64(v) * d)
	}
}
