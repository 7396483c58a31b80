package mfnoise

import (
	"context"
	"time"
)

// BuildTrace observes Build and Compare through the context, as
// net/http/httptrace observes a request: attach one with WithBuildTrace.
// Programs use it to show progress and an estimate while an optimizer runs
// (minutes at paper scale) and to say when a cached factorization was used.
// Any field may be nil; the functions are called from the building
// goroutine.
type BuildTrace struct {
	// Optimizing is called when an optimizer starts on a problem no cache
	// holds: the mechanism kind, the number of steps and the relative gap
	// it stops at.
	Optimizing func(kind string, n int, gap float64)
	// Progress is called after each optimizer iteration.
	Progress func(OptimizeProgress)
	// Optimized is called when the optimizer has finished.
	Optimized func(kind string, n int, elapsed time.Duration)
	// Cached is called when a factorization is read from the cache, with
	// the file it came from.
	Cached func(kind string, n int, path string)
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

// settings returns s with the trace's Progress chained after s's own.
func (t *BuildTrace) settings(s *OptimizeSettings) *OptimizeSettings {
	if t == nil || t.Progress == nil {
		return s
	}
	var c OptimizeSettings
	if s != nil {
		c = *s
	}
	own := c.Progress
	c.Progress = func(p OptimizeProgress) {
		if own != nil {
			own(p)
		}
		t.Progress(p)
	}
	return &c
}
