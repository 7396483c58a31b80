package mfnoise

import (
	"context"
	"time"

	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// BuildTrace observes Build and Compare through the context, as
// net/http/httptrace observes a request: attach one with WithBuildTrace.
// Programs use it to show progress and an estimate while an optimizer runs
// (minutes at paper scale) and to say when a cached factorization was used.
// Any field may be nil; the functions are called from the building
// goroutine.
type BuildTrace struct {
	// Optimizing is called when an optimizer starts on a problem no cache
	// holds: the mechanism (its kind, and for bandmf the band count, e.g.
	// "bandmf:8", which tells the candidates of bandmf:auto apart), the
	// number of steps and the relative gap it stops at.
	Optimizing func(kind string, n int, gap float64)
	// Progress is called after each optimizer iteration.
	Progress func(optimize.Progress)
	// Optimized is called when the optimizer has finished.
	Optimized func(kind string, n int, elapsed time.Duration)
	// Certified, when not nil, is called right after Optimized with what
	// the run proved: the loss it reached, its proven lower bound on the
	// family's optimum and their relative gap (so the loss lies within
	// that fraction of the best encoder of the family), and why it
	// stopped. A method without a bound (the Toeplitz families) reports
	// lowerBound and gap 0.
	Certified func(kind string, n int, loss, lowerBound, gap float64, status optimize.Status)
	// Cached is called when a factorization is read from the cache, with
	// the file it came from.
	Cached func(kind string, n int, path string)
	// Rebuilding is called when a cache entry exists but cannot be used
	// (corrupt, of another format version, stored under another key),
	// with the reason; the factorization is then built and the entry
	// replaced.
	Rebuilding func(path string, reason error)
}

type buildTraceKey struct{}

// WithBuildTrace returns a context that carries t to Build and Compare.
func WithBuildTrace(ctx context.Context, t *BuildTrace) context.Context {
	return context.WithValue(ctx, buildTraceKey{}, t)
}

func buildTraceFrom(ctx context.Context) *BuildTrace {
	t, _ := ctx.Value(buildTraceKey{}).(*BuildTrace)
	return t
}

// withProgress returns s with p chained after s's own Progress (s itself
// when p is nil).
func withProgress(set *optimize.Settings, p func(optimize.Progress)) *optimize.Settings {
	if p == nil {
		return set
	}
	var c optimize.Settings
	if set != nil {
		c = *set
	}
	own := c.Progress
	c.Progress = func(q optimize.Progress) {
		if own != nil {
			own(q)
		}
		p(q)
	}
	return &c
}

// optimize runs an optimizer under the trace and returns its result:
// Optimizing before it, Optimized and Certified after it succeeds, and the
// trace's Progress (if any) chained through the progress function run
// receives. kind and n name the problem, gap is the relative gap the
// optimizer stops at (0: it stops when the loss stalls). A nil trace runs
// the optimizer alone.
func (t *BuildTrace) optimize(kind string, n int, gap float64, run func(progress func(optimize.Progress)) (*Result, error)) (*Result, error) {
	if t == nil {
		return run(nil)
	}
	if t.Optimizing != nil {
		t.Optimizing(kind, n, gap)
	}
	start := time.Now()
	res, err := run(t.Progress)
	if err != nil {
		return nil, err
	}
	if t.Optimized != nil {
		t.Optimized(kind, n, time.Since(start))
	}
	if t.Certified != nil && res != nil {
		t.Certified(kind, n, res.Loss, res.LowerBound, res.Gap, res.Status)
	}
	return res, nil
}

// rebuilding reports an unusable cache entry at path.
func (t *BuildTrace) rebuilding(path string, reason error) {
	if t != nil && t.Rebuilding != nil {
		t.Rebuilding(path, reason)
	}
}

// cached reports a factorization read from the cache at path.
func (t *BuildTrace) cached(kind string, n int, path string) {
	if t != nil && t.Cached != nil {
		t.Cached(kind, n, path)
	}
}
