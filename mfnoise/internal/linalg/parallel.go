package linalg

import (
	"runtime"
	"sync"
)

// ParallelChunks returns how many contiguous chunks ParallelRange splits
// [0, n) into: up to GOMAXPROCS, each at least 1<<14 long so that short
// ranges run inline.
func ParallelChunks(n int) int {
	const minChunk = 1 << 14
	return max(1, min(runtime.GOMAXPROCS(0), n/minChunk))
}

// ParallelRange calls f(c, lo, hi) for chunk c = [lo, hi) of the
// ParallelChunks(n) chunks covering [0, n), one goroutine each, and waits.
func ParallelRange(n int, f func(c, lo, hi int)) {
	chunks := ParallelChunks(n)
	ParallelDo(chunks, func(c int) { f(c, c*n/chunks, (c+1)*n/chunks) })
}

// ParallelDo calls f(0), ..., f(chunks-1) in their own goroutines (the
// last on the caller's) and waits.
func ParallelDo(chunks int, f func(c int)) {
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
