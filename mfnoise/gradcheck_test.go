package mfnoise

import "math"

// checkCentralDifferences compares the analytic gradient g of f at x with
// central differences (step 1e-6) at the coordinates idx (all when idx is
// nil), calling fail for each i where |fd - g_i| > tol (1 + |g_i|).
func checkCentralDifferences(f func([]float64) float64, x, g []float64, idx []int, tol float64, fail func(i int, fd float64)) {
	const h = 1e-6
	if idx == nil {
		idx = make([]int, len(x))
		for i := range idx {
			idx[i] = i
		}
	}
	for _, i := range idx {
		xp := append([]float64(nil), x...)
		xm := append([]float64(nil), x...)
		xp[i] += h
		xm[i] -= h
		fd := (f(xp) - f(xm)) / (2 * h)
		if math.Abs(fd-g[i]) > tol*(1+math.Abs(g[i])) {
			fail(i, fd)
		}
	}
}
