package mfnoise

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/floats"
)

// parallelChunks returns how many contiguous chunks parallelRange splits
// [0, n) into: up to GOMAXPROCS, each at least 1<<14 long so that short
// ranges run inline.
func parallelChunks(n int) int {
	const minChunk = 1 << 14
	return max(1, min(runtime.GOMAXPROCS(0), n/minChunk))
}

// parallelRange calls f(c, lo, hi) for chunk c = [lo, hi) of the
// parallelChunks(n) chunks covering [0, n), one goroutine each, and waits.
func parallelRange(n int, f func(c, lo, hi int)) {
	chunks := parallelChunks(n)
	parallelDo(chunks, func(c int) { f(c, c*n/chunks, (c+1)*n/chunks) })
}

// parallelDo calls f(0), ..., f(chunks-1) in their own goroutines (the
// last on the caller's) and waits.
func parallelDo(chunks int, f func(c int)) {
	var wg sync.WaitGroup
	for c := 0; c < chunks-1; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(c)
		}()
	}
	f(chunks - 1)
	wg.Wait()
}

// parallelDot is floats.Dot split by parallelRange; the partial sums are
// added in chunk order, so the result does not depend on scheduling.
func parallelDot(a, b []float64) float64 {
	parts := make([]float64, parallelChunks(len(a)))
	parallelRange(len(a), func(c, lo, hi int) { parts[c] = floats.Dot(a[lo:hi], b[lo:hi]) })
	return floats.Sum(parts)
}

// parallelAxpy sets dst += alpha x.
func parallelAxpy(dst []float64, alpha float64, x []float64) {
	parallelRange(len(dst), func(_, lo, hi int) { floats.AddScaled(dst[lo:hi], alpha, x[lo:hi]) })
}

// parallelScale sets dst *= alpha.
func parallelScale(dst []float64, alpha float64) {
	parallelRange(len(dst), func(_, lo, hi int) { floats.Scale(alpha, dst[lo:hi]) })
}
