package optimize

import (
	"runtime"
	"sync"

	"gonum.org/v1/gonum/floats"
)

// The vectors of a factorization problem are large (n^2/2 entries for the
// (k,b) problem, n bands for the banded one), so the vector operations are
// split into blocks of vecBlock entries, run on up to GOMAXPROCS
// goroutines. Reductions add the blocks' partial sums in block order: the
// result does not depend on the number of cores or on scheduling, so the
// same inputs give the same iterates (the factorization cache relies on
// it).
const vecBlock = 1 << 14

// forBlocks calls f(b, lo, hi) for every block b = [lo, hi) of [0, n) and
// waits; blocks are dealt to at most GOMAXPROCS goroutines.
func forBlocks(n int, f func(b, lo, hi int)) {
	blocks := (n + vecBlock - 1) / vecBlock
	workers := min(runtime.GOMAXPROCS(0), blocks)
	if workers <= 1 {
		for b := 0; b < blocks; b++ {
			f(b, b*vecBlock, min(n, (b+1)*vecBlock))
		}
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Contiguous runs of blocks per worker, for the caches.
			for b := w * blocks / workers; b < (w+1)*blocks/workers; b++ {
				f(b, b*vecBlock, min(n, (b+1)*vecBlock))
			}
		}()
	}
	wg.Wait()
}

func sumBlocks(n int, f func(lo, hi int) float64) float64 {
	blocks := (n + vecBlock - 1) / vecBlock
	if blocks <= 1 {
		return f(0, n)
	}
	parts := make([]float64, blocks)
	forBlocks(n, func(b, lo, hi int) { parts[b] = f(lo, hi) })
	sum := 0.0
	for _, v := range parts {
		sum += v
	}
	return sum
}

// dot returns a^T b.
func dot(a, b []float64) float64 {
	return sumBlocks(len(a), func(lo, hi int) float64 { return floats.Dot(a[lo:hi], b[lo:hi]) })
}

// weightedSquares returns sum_i w_i y_i^2.
func weightedSquares(w, y []float64) float64 {
	return sumBlocks(len(y), func(lo, hi int) float64 {
		sum := 0.0
		for i, v := range y[lo:hi] {
			sum += w[lo+i] * v * v
		}
		return sum
	})
}

// axpy sets dst += alpha x.
func axpy(dst []float64, alpha float64, x []float64) {
	forBlocks(len(dst), func(_, lo, hi int) { floats.AddScaled(dst[lo:hi], alpha, x[lo:hi]) })
}

// scale sets dst *= alpha.
func scale(dst []float64, alpha float64) {
	forBlocks(len(dst), func(_, lo, hi int) { floats.Scale(alpha, dst[lo:hi]) })
}

// addScaledTo sets dst = x + alpha d.
func addScaledTo(dst, x []float64, alpha float64, d []float64) {
	forBlocks(len(dst), func(_, lo, hi int) { floats.AddScaledTo(dst[lo:hi], x[lo:hi], alpha, d[lo:hi]) })
}

// subTo sets dst = a - b.
func subTo(dst, a, b []float64) {
	forBlocks(len(dst), func(_, lo, hi int) { floats.SubTo(dst[lo:hi], a[lo:hi], b[lo:hi]) })
}
