package privacy

import (
	"context"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/accountant"
)

// AccountKind names the accounting event of a question to the planner
// without a run ("train account").
type AccountKind string

const (
	// AccountGaussian is one Gaussian mechanism of sensitivity 1: an
	// unamplified matrix mechanism's whole run.
	AccountGaussian AccountKind = "gaussian"
	// AccountDPSGD is DP-SGD: one Poisson-subsampled Gaussian per step.
	AccountDPSGD AccountKind = "dpsgd"
	// AccountBandMF is amplified BandMF: band sampling with Bands
	// partitions (banded-MF Thm 4).
	AccountBandMF AccountKind = "bandmf"
	// AccountAllocation is random allocation: DP-SGD with Bands = 1, or a
	// banded encoder under band allocation with Bands partitions (docs/math.md,
	// section 7.1).
	AccountAllocation AccountKind = "allocation"
)

// AccountRequest asks the planner for the accounting of one event: the
// epsilon at noise multiplier Sigma, or the noise multiplier at target
// Epsilon (exactly one of them positive).
type AccountRequest struct {
	Kind AccountKind
	// Q is DP-SGD's sampling rate; 0 means Batch/Examples.
	Q float64
	// Examples m and Batch B (DP-SGD without Q, BandMF), Bands b
	// (BandMF) and Steps T (DP-SGD, BandMF).
	Examples, Batch, Bands, Steps int
	Sigma, Epsilon, Delta         float64
	Accountant                    AccountantKind
}

// AccountResult is the planner's answer.
type AccountResult struct {
	Composition Composition
	// Sigma and Epsilon: the one given and the one computed.
	Sigma, Epsilon float64
	// Calibrated says Sigma was calibrated to a target epsilon.
	Calibrated bool
	// Accountant is the accountant's name.
	Accountant string
	// Compositions is the number of Gaussian mechanisms composed after
	// Steps steps.
	Compositions int
}

// Account answers r: the composition of its kind (refusing a band count
// outside [1, m/B], RuleBands), then the epsilon at Sigma or the
// calibrated sigma at Epsilon, by r's accountant.
func Account(ctx context.Context, r AccountRequest) (AccountResult, error) {
	var res AccountResult
	if (r.Sigma > 0) == (r.Epsilon > 0) {
		return res, invalidf("account: give exactly one of sigma > 0 or epsilon > 0")
	}
	if !(r.Delta > 0 && r.Delta < 1) {
		return res, invalidf("account: delta %v must lie in (0,1)", r.Delta)
	}
	if r.Steps <= 0 {
		return res, invalidf("account: steps %d must be positive", r.Steps)
	}
	acct, err := r.Accountant.New()
	if err != nil {
		return res, err
	}
	if res.Composition, err = r.composition(); err != nil {
		return res, err
	}
	res.Accountant, res.Compositions = acct.Name(), res.Composition.Compositions(r.Steps)
	if r.Sigma > 0 {
		res.Sigma = r.Sigma
		res.Epsilon, err = res.Composition.Epsilon(acct, r.Sigma, r.Steps, r.Delta)
		return res, err
	}
	cal, err := res.Composition.Calibrate(ctx, acct, r.Steps, r.Epsilon, r.Delta)
	if err != nil {
		return res, err
	}
	res.Sigma, res.Epsilon, res.Calibrated = cal.Sigma, cal.Epsilon, true
	return res, nil
}

// composition is the accounting event of r's kind.
func (r AccountRequest) composition() (Composition, error) {
	switch r.Kind {
	case AccountGaussian:
		return Composition{}, nil
	case AccountDPSGD:
		q := r.Q
		if q == 0 && r.Examples > 0 && r.Batch > 0 {
			q = float64(r.Batch) / float64(r.Examples)
		}
		return PoissonSampling(q)
	case AccountBandMF:
		return NewBandSampling(r.Examples, r.Batch, r.Bands)
	case AccountAllocation:
		return NewAllocationSampling(r.Examples, r.Batch, r.Bands)
	}
	return Composition{}, invalidf("account: kind %q: want gaussian, dpsgd, bandmf or allocation", string(r.Kind))
}

// PoissonSampling is DP-SGD's composition: one Poisson-subsampled Gaussian
// per step at rate q in (0,1].
func PoissonSampling(q float64) (Composition, error) {
	if !(q > 0 && q <= 1) {
		return Composition{}, invalidf("sampling rate %v must lie in (0,1]", q)
	}
	return Composition{Amplified: true, Q: q, Partitions: 1}, nil
}

// NewBandSampling is BandSampling with the planner's rule on the band
// count: every partition must hold at least one batch, 1 <= bands <=
// floor(examples/batch) (refused with RuleBands).
func NewBandSampling(examples, batch, bands int) (Composition, error) {
	if examples <= 0 || batch <= 0 {
		return Composition{}, invalidf("band sampling needs examples and batch > 0, got %d and %d", examples, batch)
	}
	if bands < 1 || bands > examples/batch {
		return Composition{}, refuse(RuleBands, "%d bands: a band count must lie in [1, examples/batch = %d]", bands, examples/batch)
	}
	return BandSampling(examples, batch, bands), nil
}

// NewAllocationSampling is the composition of random allocation over
// bands partitions of floor(examples/bands) (sampler.NewBandAllocation;
// bands = 1 is sampler.NewRandomAllocation): epochs of t =
// floor(floor(examples/bands)/batch) steps of each partition. The band
// count must leave every partition at least one batch (RuleBands).
func NewAllocationSampling(examples, batch, bands int) (Composition, error) {
	if examples <= 0 || batch <= 0 {
		return Composition{}, invalidf("random allocation needs examples and batch > 0, got %d and %d", examples, batch)
	}
	if bands < 1 || bands > examples/batch {
		return Composition{}, refuse(RuleBands, "%d bands: a band count must lie in [1, examples/batch = %d]", bands, examples/batch)
	}
	t := examples / bands / batch
	return Composition{Amplified: true, Examples: examples, Batch: batch, Partitions: bands, Allocation: t}, nil
}

// GaussianSigma is the noise multiplier of one Gaussian mechanism of
// sensitivity 1 with (eps, delta), by the exact Gaussian rule (Balle &
// Wang 2018): the float release's calibration (PlanRelease) and the
// noise scale "train compare" reports.
func GaussianSigma(eps, delta float64) (float64, error) {
	if !(eps > 0) || math.IsInf(eps, 0) {
		return 0, invalidf("epsilon %v must be positive and finite", eps)
	}
	s, err := accountant.GaussianSigma(eps, delta)
	if err != nil {
		return 0, calibrationError("calibrating sigma", eps, err)
	}
	return s, nil
}

// GaussianEpsilon is the epsilon at delta of one Gaussian mechanism of
// sensitivity 1 at noise multiplier sigma, by the exact Gaussian rule:
// also the epsilon at delta of mu-GDP with mu = 1/sigma (Dong, Roth & Su
// 2019), which package audit turns its lower bounds on mu into.
func GaussianEpsilon(sigma, delta float64) (float64, error) {
	e, err := accountant.GaussianEpsilon(sigma, delta)
	if err != nil {
		return 0, fmt.Errorf("privacy: %w", err)
	}
	return e, nil
}
