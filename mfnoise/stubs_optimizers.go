package mfnoise

// Compile stubs for the optimizer and storage API that another branch
// implements. The lead deletes this file at merge; nothing here is meant to
// survive it.

import (
	"context"
	"errors"
	"time"
)

var errOptimizerStub = errors.New("mfnoise: optimizer not available in this build (stub)")

// OptimizeSettings tunes an optimizer run (stub; real definition on the
// optimizer branch).
type OptimizeSettings struct {
	Gap      float64
	MaxIter  int
	Progress func(OptimizeProgress)
}

// OptimizeProgress reports one optimizer iteration (stub).
type OptimizeProgress struct {
	Iter                  int
	Loss, LowerBound, Gap float64
}

// OptimizeResult is an optimizer's answer (stub).
type OptimizeResult struct {
	Factorization         *Factorization
	Loss, LowerBound, Gap float64
	Iterations            int
	Elapsed               time.Duration
}

// OptimizeSingle is the single-participation optimum (stub).
func OptimizeSingle(ctx context.Context, w Workload, s *OptimizeSettings) (*OptimizeResult, error) {
	return nil, errOptimizerStub
}

// OptimizeKB is the (k,b)-participation optimum (stub).
func OptimizeKB(ctx context.Context, w Workload, schema Schema, s *OptimizeSettings) (*OptimizeResult, error) {
	return nil, errOptimizerStub
}

// OptimizeBanded is banded MF (stub).
func OptimizeBanded(ctx context.Context, w Workload, bands int, s *OptimizeSettings) (*OptimizeResult, error) {
	return nil, errOptimizerStub
}

// ProblemKey identifies a factorization problem in the cache (stub).
type ProblemKey struct {
	Kind     string
	Workload Workload
	Schema   Schema
	Bands    int
	Stamps   int
	Gap      float64
}

// Cache stores factorizations on disk (stub: never stores).
type Cache struct{ Dir string }

// GetOrBuild returns the cached factorization for key or builds it (stub:
// always builds).
func (c *Cache) GetOrBuild(ctx context.Context, key ProblemKey, build func(context.Context) (*Factorization, error)) (*Factorization, bool, error) {
	f, err := build(ctx)
	return f, false, err
}
