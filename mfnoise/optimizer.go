package mfnoise

import (
	"context"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// Problem is what Optimize solves: the encoder of a family with the least
// loss for a workload under a participation schema.
type Problem struct {
	// Workload is A.
	Workload dpcore.Workload
	// Schema is the participation the encoder is optimized for; the zero
	// value means single participation. SingleFamily needs single
	// participation and KBFamily (k,b)-participation; BandedFamily does
	// not read it (its encoder has sensitivity sqrt(k) under any (k,b) or
	// min-sep schema with b >= bands).
	Schema dpcore.Schema
	// Family is the encoder family searched: SingleFamily, KBFamily,
	// BandedFamily, ToeplitzFamily or BLTFamily.
	Family Family
}

// Family is an encoder family Optimize searches. Its values are the
// types of this package named *Family.
type Family interface {
	optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error)
}

// Result is what Optimize returns: the encoder (a dense factorization or a
// Toeplitz encoder, by family), its loss, the lower bound and relative gap
// when the method proves one (0 otherwise), the iterations used, why the
// optimizer stopped (optimize.Converged when the gap was reached,
// optimize.Stalled when the loss stopped decreasing for a method without
// a bound) and the wall time.
type Result struct {
	// Factorization is the dense factorization of SingleFamily, KBFamily
	// and BandedFamily, its encoder normalized to sensitivity 1 under the
	// schema it was optimized for (nil for the Toeplitz families).
	Factorization *Factorization
	// Toeplitz is the encoder of ToeplitzFamily and BLTFamily (nil for the
	// dense families).
	Toeplitz *toeplitz.Encoder
	// Loss is the objective reached: sens^2 ||B||_F^2 for unit noise
	// multiplier under the schema (for a Toeplitz family with the
	// MaxError objective, the worst step's error variance).
	Loss, LowerBound, Gap float64
	Iterations            int
	Status                optimize.Status
	Elapsed               time.Duration
}

// Optimize finds the encoder of p.Family with the least loss for
// p.Workload under p.Schema, tuned by set (nil: the family's defaults).
// It is the one door to every optimizer of this package; the families
// document their methods and stopping rules.
func Optimize(ctx context.Context, p Problem, set *optimize.Settings) (*Result, error) {
	if p.Family == nil {
		return nil, guard.Invalidf("optimize: no family")
	}
	if err := set.Validate(); err != nil {
		return nil, err
	}
	schema := p.Schema
	if schema.Kind == "" {
		schema = dpcore.SingleParticipation()
	}
	return p.Family.optimize(ctx, p.Workload, schema, set)
}

// SingleFamily is the optimal dense encoder under single participation
// (Denisov et al. 2022; see optimizeSingle): a fixed point with a proven
// lower bound, stopping at the certified gap set.Gap (default 1e-4).
type SingleFamily struct{}

func (SingleFamily) optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error) {
	if schema.Kind != dpcore.Single {
		return nil, guard.Invalidf("optimize single: schema %v is not single participation (use the kb family)", schema)
	}
	return optimizeSingle(ctx, w, set)
}

// KBFamily is the optimal dense encoder under (k,b)-participation
// (multi-epoch paper; see optimizeKB): L-BFGS with a proven lower bound,
// stopping at the certified gap set.Gap (default 1e-4).
type KBFamily struct{}

func (KBFamily) optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error) {
	return optimizeKB(ctx, w, schema, set, false)
}

// BandedFamily is the optimal dense encoder with Bands bands (banded-MF;
// see optimizeBanded): L-BFGS with a proven lower bound, stopping at the
// certified gap set.Gap (default 1e-3).
type BandedFamily struct{ Bands int }

func (f BandedFamily) optimize(ctx context.Context, w dpcore.Workload, _ dpcore.Schema, set *optimize.Settings) (*Result, error) {
	return optimizeBanded(ctx, w, f.Bands, set, false)
}

// ToeplitzFamily is the banded Toeplitz encoder with Bands bands
// (toeplitz:BANDS; McKenna 2024), optimized in O(n Bands) memory by
// toeplitz.Optimize for Objective (default toeplitz.TotalLoss).
type ToeplitzFamily struct {
	Bands     int
	Objective toeplitz.Objective
}

func (f ToeplitzFamily) optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error) {
	return optimizeToeplitz(ctx, toeplitz.Problem{Workload: w, Schema: schema, Bands: f.Bands, Objective: f.Objective}, set)
}

// BLTFamily is the buffered linear Toeplitz encoder with Buffers buffers
// (blt:NBUF; McMahan et al. 2024), optimized in O(n Buffers) time per
// evaluation by toeplitz.Optimize for Objective; with Unbounded, for the
// sensitivity of a stream with no horizon (see toeplitz.Problem).
type BLTFamily struct {
	Buffers   int
	Objective toeplitz.Objective
	Unbounded bool
}

func (f BLTFamily) optimize(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, set *optimize.Settings) (*Result, error) {
	return optimizeToeplitz(ctx, toeplitz.Problem{Workload: w, Schema: schema, Buffers: f.Buffers, Objective: f.Objective, Unbounded: f.Unbounded}, set)
}

// optimizeToeplitz is toeplitz.Optimize as a Result.
func optimizeToeplitz(ctx context.Context, p toeplitz.Problem, set *optimize.Settings) (*Result, error) {
	t, res, err := toeplitz.Optimize(ctx, p, set)
	if err != nil {
		return nil, err
	}
	return &Result{Toeplitz: t, Loss: res.Loss, Iterations: res.Iterations, Status: res.Status, Elapsed: res.Elapsed}, nil
}
