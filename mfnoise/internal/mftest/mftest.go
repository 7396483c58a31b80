// Package mftest holds the checks the tests of mfnoise and its family
// packages share: relative error, the enumeration of min-sep patterns and
// central-difference gradient checks. It is imported by tests only.
package mftest

import "math"

// RelErr is |got - want| / |want| (want floored at 1e-300).
func RelErr(got, want float64) float64 {
	return math.Abs(got-want) / math.Max(math.Abs(want), 1e-300)
}

// MinSepPatterns enumerates every nonempty pattern of at most k steps of
// 0..n-1 with gaps >= b.
func MinSepPatterns(n, k, b int) [][]int {
	var out [][]int
	var rec func(start int, cur []int)
	rec = func(start int, cur []int) {
		if len(cur) > 0 {
			out = append(out, append([]int(nil), cur...))
		}
		if len(cur) == k {
			return
		}
		for i := start; i < n; i++ {
			rec(i+b, append(cur, i))
		}
	}
	rec(0, nil)
	return out
}

// CheckCentralDifferences compares the analytic gradient g of f at x with
// central differences (step 1e-6) at the coordinates idx (all when idx is
// nil), calling fail for each i where |fd - g_i| > tol (1 + |g_i|).
func CheckCentralDifferences(f func([]float64) float64, x, g []float64, idx []int, tol float64, fail func(i int, fd float64)) {
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
