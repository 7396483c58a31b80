package privacy

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
)

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("privacy", format, args...)
}

// AccountantKind names an accountant.
type AccountantKind string

const (
	// PLD is the privacy loss distribution accountant (the default; what
	// the papers report).
	PLD AccountantKind = "pld"
	// RDP is the Rényi-DP accountant (looser, cheaper).
	RDP AccountantKind = "rdp"
)

// ParseAccountant parses a command-line accountant name.
func ParseAccountant(name string) (AccountantKind, error) {
	k := AccountantKind(name)
	if _, err := k.New(); err != nil {
		return "", err
	}
	return k, nil
}

// New returns the accountant; the zero value is PLD.
func (k AccountantKind) New() (accountant.Accountant, error) {
	switch k {
	case PLD, "":
		return accountant.NewPLD(accountant.PLDOptions{}), nil
	case RDP:
		return accountant.NewRDP(nil), nil
	}
	return nil, invalidf("accountant %q: want pld or rdp", string(k))
}

// DefaultDelta is the delta of a run over m examples when none is given:
// min(1e-5, 1/m).
func DefaultDelta(m int) float64 { return math.Min(1e-5, 1/float64(max(m, 1))) }

// Composition is the accounting event of a run as a function of its noise
// multiplier and the number of steps done (SPEC 8).
//
// Unamplified (the zero value) is one Gaussian mechanism whatever the
// number of steps: a matrix mechanism accounted with the sensitivity of its
// participation schema, normalized to 1. Amplified with Partitions = 1 is
// DP-SGD: one Poisson-subsampled Gaussian at rate Q per step. Amplified
// with Partitions = b > 1 is amplified BandMF (banded-MF Thm 4): one
// composition every b steps at rate Batch/floor(Examples/b). Amplified with
// Allocation = t > 0 is DP-SGD under random allocation: one composition of
// the random allocation of a Gaussian over t steps every t steps, or with
// Partitions = b > 1 (band allocation), every b t steps.
type Composition struct {
	Amplified  bool
	Q          float64 // DP-SGD's sampling rate
	Examples   int     // m, for band sampling
	Batch      int     // B, for band sampling
	Partitions int     // 1 for DP-SGD, b for band sampling
	Allocation int     // t, steps per epoch of random allocation
}

// stepsPerComposition is the number of steps each composition covers.
func (c Composition) stepsPerComposition() int {
	if c.Allocation > 0 {
		return c.Allocation * max(c.Partitions, 1)
	}
	return max(c.Partitions, 1)
}

// BandSampling is the composition of band sampling of batch expected
// examples a step from examples examples in bands partitions: with one
// partition, Poisson sampling at rate batch/examples every step (DP-SGD);
// with b > 1, amplified BandMF.
func BandSampling(examples, batch, bands int) Composition {
	bands = max(bands, 1)
	c := Composition{Amplified: true, Examples: examples, Batch: batch, Partitions: bands}
	if bands == 1 && examples > 0 {
		c.Q = float64(batch) / float64(examples)
	}
	return c
}

// Event is the accounting event after steps steps at noise multiplier
// sigma.
func (c Composition) Event(sigma float64, steps int) (accountant.Event, error) {
	switch {
	case !c.Amplified:
		return accountant.UnamplifiedMFEvent(sigma)
	case c.Allocation > 0:
		// Each partition's steps, ceil(steps/b), in band epochs of t.
		p := max(c.Partitions, 1)
		return accountant.DPSGDAllocationEvent(sigma, c.Allocation, (steps+p-1)/p)
	case c.Partitions <= 1:
		return accountant.DPSGDEvent(sigma, c.Q, steps)
	}
	return accountant.BandMFEvent(sigma, c.Examples, c.Batch, c.Partitions, steps)
}

// Compositions is the number of mechanisms composed after steps steps: 1
// unamplified, steps for DP-SGD, ceil(steps/b) for band sampling,
// ceil(steps/t) epochs for random allocation.
func (c Composition) Compositions(steps int) int {
	if !c.Amplified {
		return 1
	}
	p := c.stepsPerComposition()
	return (steps + p - 1) / p
}

// Rate is the sampling rate of each composition: Q for DP-SGD,
// B/floor(m/b) for band sampling, 0 unamplified; for random allocation,
// 1/t, the probability that an example joins a given step.
func (c Composition) Rate() float64 {
	switch {
	case !c.Amplified:
		return 0
	case c.Allocation > 0:
		return 1 / float64(c.Allocation)
	case c.Partitions <= 1:
		return c.Q
	}
	return float64(c.Batch) / math.Floor(float64(c.Examples)/float64(c.Partitions))
}

// Epsilon is the epsilon after steps steps at sigma.
func (c Composition) Epsilon(acct accountant.Accountant, sigma float64, steps int, delta float64) (float64, error) {
	ev, err := c.Event(sigma, steps)
	if err != nil {
		return 0, accountingError("accounting", err)
	}
	e, err := acct.Epsilon(ev, delta)
	if err != nil {
		return 0, accountingError("accounting", err)
	}
	return e, nil
}

// Calibrate finds the smallest noise multiplier whose epsilon after steps
// steps is at most eps.
func (c Composition) Calibrate(ctx context.Context, acct accountant.Accountant, steps int, eps, delta float64) (accountant.Calibration, error) {
	cal, err := accountant.CalibrateContext(ctx, acct, func(sigma float64) (accountant.Event, error) { return c.Event(sigma, steps) }, eps, delta)
	if err != nil {
		return cal, calibrationError("calibrating sigma", eps, err)
	}
	return cal, nil
}

// calibrationError is the error of what (calibrating sigma, or a band
// choice) at target eps: a *Refusal (RuleBudget) when no noise multiplier
// meets the target.
func calibrationError(what string, eps float64, err error) error {
	if what == "calibrating sigma" {
		what = fmt.Sprintf("calibrating sigma for epsilon %g", eps)
	}
	return accountingError(what, err)
}

// accountingError is the error of the accounting step what: a *Refusal
// (RuleBudget) when the accountant finds the target infeasible (no noise
// multiplier meets it, or no finite epsilon holds at that delta), else
// the accountant's error in context.
func accountingError(what string, err error) error {
	if errors.Is(err, accountant.ErrInfeasible) {
		return &Refusal{Rule: RuleBudget, Reason: what + ": " + err.Error(), Err: err}
	}
	return fmt.Errorf("privacy: %s: %w", what, err)
}
