package accountant

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Calibration is the result of Calibrate.
type Calibration struct {
	// Sigma is the calibrated noise multiplier.
	Sigma float64
	// Epsilon is the epsilon achieved at Sigma and Delta; it is at most
	// the target.
	Epsilon float64
	// Delta is the target delta.
	Delta float64
	// Accountant names the accountant used.
	Accountant string
	// Evaluations counts the accountant calls made.
	Evaluations int
}

// Search range and tolerance of Calibrate.
const (
	minSigma    = 1e-3
	maxSigma    = 1e6
	calRelTol   = 1e-5
	maxCalSteps = 200
)

// Calibrate returns the smallest noise multiplier sigma, to a relative
// tolerance of 1e-5 (or one whose epsilon is within 1e-5 of the target,
// relatively, and below it), for which acct certifies event(sigma) as
// (eps, delta)-DP. The search brackets sigma by doubling and then refines it
// by a safeguarded secant method in log sigma; the returned sigma always
// meets the target. A PLD accountant first calibrates on a ten times
// coarser grid, whose pessimistic answer is close to the fine one; the
// fine search steps from it along the coarse curve's slope. If even
// sigma = 1e6 misses the target, the error wraps ErrInfeasible; the search
// does not go below sigma = 1e-3, so for targets met with less noise than
// that it returns the smallest sigma it tried.
func Calibrate(acct Accountant, event func(sigma float64) (Event, error), eps, delta float64) (Calibration, error) {
	return CalibrateContext(context.Background(), acct, event, eps, delta)
}

// CalibrateContext is Calibrate with a context checked between accountant
// calls, for PLD calibrations of long or many-component events.
func CalibrateContext(ctx context.Context, acct Accountant, event func(sigma float64) (Event, error), eps, delta float64) (Calibration, error) {
	if acct == nil || event == nil {
		return Calibration{}, invalidf("calibrate: nil accountant or event")
	}
	if err := checkEps(eps); err != nil {
		return Calibration{}, fmt.Errorf("calibrate: %w", err)
	}
	if err := checkDelta(delta); err != nil {
		return Calibration{}, fmt.Errorf("calibrate: %w", err)
	}
	cal := Calibration{Delta: delta, Accountant: acct.Name()}
	f := func(a Accountant, h *history, sigma float64) (float64, error) {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("calibrate: %w", err)
		}
		cal.Evaluations++
		e, err := event(sigma)
		if err != nil {
			return 0, fmt.Errorf("calibrate: event(%v): %w", sigma, err)
		}
		got, err := a.Epsilon(e, delta)
		if err != nil {
			return 0, fmt.Errorf("calibrate: sigma = %v: %w", sigma, err)
		}
		return got, h.add(a.Name(), sigma, got)
	}
	var fine history
	start, step, slope := 1.0, 1.1, 0.0
	if p, ok := acct.(*pldAccountant); ok {
		coarse, h := p.coarse(), &history{}
		c, err := calibrate(func(s float64) (float64, error) { return f(coarse, h, s) }, eps, start, 1.1, calRelTol*10, 0)
		if err != nil {
			return cal, err
		}
		// The coarse grid's pessimism is a fraction of a percent of
		// sigma for most events and a few percent for random allocation
		// (whose log-sum grid is coarser in proportion): the fine search
		// starts there and takes its first step along the coarse curve's
		// slope, which lands next to the fine answer.
		start, step, slope = c.Sigma, 1.001, h.slopeAt(c.Sigma)
	}
	c, err := calibrate(func(s float64) (float64, error) { return f(acct, &fine, s) }, eps, start, step, calRelTol, slope)
	if err != nil {
		return cal, err
	}
	cal.Sigma, cal.Epsilon = c.Sigma, c.Epsilon
	return cal, nil
}

// monotoneTol is the relative amount by which an accountant's epsilon may
// rise with sigma, from rounding, before Calibrate refuses its answers.
const monotoneTol = 1e-6

// history records one accountant's answers during a calibration. The
// search is only right if epsilon is a non-increasing function of sigma;
// an accountant that breaks this (a numerical failure, as in issue 16,
// where PLD gave eps 20 at a sigma whose true eps is in the millions and
// the search settled there) fails the calibration instead of choosing a
// sigma by a wrong epsilon.
type history struct{ sigma, eps []float64 }

func (h *history) add(name string, sigma, eps float64) error {
	if math.IsNaN(eps) || eps < 0 {
		return fmt.Errorf("calibrate: %s accountant returned epsilon %v at sigma %v: %w", name, eps, sigma, ErrUnsupported)
	}
	for i, s := range h.sigma {
		lo, elo, hi, ehi := s, h.eps[i], sigma, eps
		if lo > hi {
			lo, elo, hi, ehi = hi, ehi, lo, elo
		}
		if lo < hi && ehi > elo && ehi-elo > monotoneTol*elo {
			return fmt.Errorf("calibrate: %s accountant's epsilon rises with sigma (%v at sigma %v, %v at sigma %v); refusing to calibrate on it: %w",
				name, elo, lo, ehi, hi, ErrUnsupported)
		}
	}
	h.sigma, h.eps = append(h.sigma, sigma), append(h.eps, eps)
	return nil
}

// slopeAt returns the slope of log eps against log sigma between the two
// answers nearest sigma (in log sigma) at different sigma with finite,
// positive epsilons, or 0 if there are none or it is not negative.
func (h *history) slopeAt(sigma float64) float64 {
	i, j := -1, -1
	dist := func(k int) float64 { return math.Abs(math.Log(h.sigma[k] / sigma)) }
	for k, e := range h.eps {
		if !(e > 0) || isInf(e) {
			continue
		}
		switch {
		case i < 0 || dist(k) < dist(i):
			i, j = k, i
		case j < 0 || dist(k) < dist(j):
			j = k
		}
	}
	if i < 0 || j < 0 || h.sigma[i] == h.sigma[j] {
		return 0
	}
	s := math.Log(h.eps[i]/h.eps[j]) / math.Log(h.sigma[i]/h.sigma[j])
	if !(s < 0) || isInf(s) {
		return 0
	}
	return s
}

// calibrate searches log sigma from start: its first step is by factor,
// or, given a negative slope of log eps against log sigma (0: none), the
// secant step that slope predicts, overshot slightly so that the bracket
// closes.
func calibrate(f func(float64) (float64, error), target, start, factor, tol, slope float64) (Calibration, error) {
	// eps falls roughly like a power of sigma, so search log eps against
	// log sigma, where the relation is nearly linear.
	g := func(e float64) float64 { return math.Log(e) - math.Log(target) }
	eval := func(x float64) (float64, float64, error) {
		e, err := f(math.Exp(x))
		return e, g(e), err
	}
	// Bracket: lo misses the target (g > 0), hi meets it (g <= 0). Step
	// from start by factor, then extrapolate by secants, at most doubling
	// the step in log sigma each time.
	x0 := math.Log(start)
	e0, g0, err := eval(x0)
	if err != nil {
		return Calibration{}, err
	}
	step := math.Log(factor)
	if g0 <= 0 {
		step = -step
	}
	if slope < 0 && !isInf(g0) {
		if s := -1.05 * g0 / slope; math.Abs(s) > tol && math.Abs(s) < 1 {
			step = s
		}
	}
	x1 := x0 + step
	var e1, g1 float64
	for {
		if x1 > math.Log(maxSigma) {
			return Calibration{}, fmt.Errorf("calibrate: eps = %v needs sigma > %v: %w", target, maxSigma, ErrInfeasible)
		}
		if x1 < math.Log(minSigma) {
			return Calibration{Sigma: math.Exp(x0), Epsilon: e0}, nil
		}
		if e1, g1, err = eval(x1); err != nil {
			return Calibration{}, err
		}
		if (g0 > 0) != (g1 > 0) {
			break
		}
		next := x1 + 2*(x1-x0)
		if s := (g1 - g0) / (x1 - x0); !isInf(s) && s < 0 && !isInf(g1) {
			// Secant root, overshot slightly so the bracket closes.
			guess := x1 - 1.05*g1/s
			if (guess-x1)/(x1-x0) > 0 && math.Abs(guess-x1) < 4*math.Abs(next-x1) {
				next = guess
			}
		}
		x0, e0, g0 = x1, e1, g1
		x1 = next
	}
	lo, glo, hi, ehi, ghi := x0, g0, x1, e1, g1
	if g0 <= 0 {
		lo, glo, hi, ehi, ghi = x1, g1, x0, e0, g0
	}
	// Illinois regula falsi, falling back to bisection when eps is
	// infinite or zero.
	side := 0
	for i := 0; i < maxCalSteps && math.Exp(hi-lo)-1 > tol && ghi < -tol; i++ {
		m := 0.5 * (lo + hi)
		if !isInf(glo) && !isInf(ghi) && glo != ghi {
			m = hi - ghi*(hi-lo)/(ghi-glo)
			w := hi - lo
			m = math.Min(math.Max(m, lo+0.01*w), hi-0.01*w)
		}
		e, gm, err := eval(m)
		if err != nil {
			return Calibration{}, err
		}
		if gm > 0 {
			lo, glo = m, gm
			if side == -1 {
				ghi /= 2
			}
			side = -1
		} else {
			hi, ehi, ghi = m, e, gm
			if side == 1 {
				glo /= 2
			}
			side = 1
		}
	}
	return Calibration{Sigma: math.Exp(hi), Epsilon: ehi}, nil
}

// DPSGDEvent returns the event of DP-SGD with Poisson sampling at rate q
// for the given number of steps: steps compositions of a Poisson-sampled
// Gaussian mechanism with noise multiplier sigma.
func DPSGDEvent(sigma, q float64, steps int) (Event, error) {
	if err := checkSigma(sigma); err != nil {
		return nil, fmt.Errorf("DPSGDEvent: %w", err)
	}
	if err := checkQ(q); err != nil {
		return nil, fmt.Errorf("DPSGDEvent: %w", err)
	}
	if steps <= 0 {
		return nil, invalidf("DPSGDEvent: steps = %d, want > 0", steps)
	}
	return SelfComposed(PoissonSampled(q, Gaussian(sigma)), steps), nil
}

// DPSGDAllocationEvent returns the event of DP-SGD under random
// allocation (sampler.NewRandomAllocation) for the given number of steps:
// epochs of t steps in which every example joins exactly one step, drawn
// uniformly, so ceil(steps/t) compositions of the random allocation of a
// Gaussian mechanism with noise multiplier sigma over t steps (a partial
// last epoch is accounted as a whole one: its releases are a part of a
// whole epoch's).
func DPSGDAllocationEvent(sigma float64, t, steps int) (Event, error) {
	if err := checkSigma(sigma); err != nil {
		return nil, fmt.Errorf("DPSGDAllocationEvent: %w", err)
	}
	if t <= 0 || steps <= 0 {
		return nil, invalidf("DPSGDAllocationEvent: t = %d and steps = %d, want > 0", t, steps)
	}
	return SelfComposed(RandomAllocation(t, Gaussian(sigma)), (steps+t-1)/t), nil
}

// BandMFEvent returns the event of a bands-banded matrix-factorization
// mechanism whose encoder has unit column norms, trained with partitioned
// band sampling (amplified BandMF, Choquette-Choo et al. 2023, Alg. 2 and
// Thm. 4): the examples are split into bands disjoint subsets of
// floor(examples/bands), step i samples the subset (i mod bands) by Poisson
// sampling with rate q = batch/floor(examples/bands), and the mechanism is
// ceil(steps/bands) compositions of a Poisson-sampled Gaussian with rate q.
// bands = 1 is DP-SGD. It is an error if q > 1 or bands > examples.
// The accounting assumes Poisson sampling within each subset; sampling
// fixed-size subsets instead is not covered by this event.
func BandMFEvent(sigma float64, examples, batch, bands, steps int) (Event, error) {
	if err := checkSigma(sigma); err != nil {
		return nil, fmt.Errorf("BandMFEvent: %w", err)
	}
	q, comps, err := bandParams(examples, batch, bands, steps)
	if err != nil {
		return nil, err
	}
	return SelfComposed(PoissonSampled(q, Gaussian(sigma)), comps), nil
}

func bandParams(examples, batch, bands, steps int) (q float64, comps int, err error) {
	switch {
	case examples <= 0:
		return 0, 0, invalidf("BandMFEvent: examples = %d, want > 0", examples)
	case batch <= 0:
		return 0, 0, invalidf("BandMFEvent: batch = %d, want > 0", batch)
	case steps <= 0:
		return 0, 0, invalidf("BandMFEvent: steps = %d, want > 0", steps)
	case bands <= 0 || bands > examples:
		return 0, 0, invalidf("BandMFEvent: bands = %d, want in [1, examples = %d]", bands, examples)
	}
	subset := examples / bands
	if batch > subset {
		return 0, 0, invalidf("BandMFEvent: batch %d exceeds the %d examples of each of %d bands (q > 1)", batch, subset, bands)
	}
	return float64(batch) / float64(subset), (steps + bands - 1) / bands, nil
}

// UnamplifiedMFEvent returns the event of a matrix-factorization mechanism
// without amplification whose sensitivity is normalized to 1: a single
// Gaussian mechanism with noise multiplier sigma.
func UnamplifiedMFEvent(sigma float64) (Event, error) {
	if err := checkSigma(sigma); err != nil {
		return nil, fmt.Errorf("UnamplifiedMFEvent: %w", err)
	}
	return Gaussian(sigma), nil
}

// BandCandidate is a number of bands to consider in SelectBands, with the
// loss of the best bands-banded factorization (sensitivity normalized to 1,
// so that the noisy workload's error is sigma^2 * Loss).
type BandCandidate struct {
	Bands int
	Loss  float64
	// Proxy says Loss is an upper bound from a cheaper encoder with the
	// same band count (the banded Toeplitz optimum), not the optimized
	// banded factorization's own loss.
	Proxy bool `json:",omitempty"`
}

// BandChoice is one row of a BandSelection.
type BandChoice struct {
	BandCandidate
	// Q and Compositions are the amplified event's sampling rate and
	// number of compositions.
	Q            float64
	Compositions int
	// Sigma is the calibrated noise multiplier and Epsilon the achieved
	// epsilon.
	Sigma, Epsilon float64
	// Score is Sigma^2 * Loss, the expected error to minimize.
	Score float64
	// Err explains why the candidate was not scored; Score and Sigma are
	// then 0.
	Err string `json:",omitempty"`
}

// BandSelection is the result of SelectBands.
type BandSelection struct {
	// Best indexes Table at the chosen candidate.
	Best int
	// Table has one row per candidate, in input order.
	Table []BandChoice
}

// Chosen returns the selected row, or the zero BandChoice if none was.
func (s BandSelection) Chosen() BandChoice {
	if s.Best < 0 || s.Best >= len(s.Table) {
		return BandChoice{}
	}
	return s.Table[s.Best]
}

// SelectBands chooses the number of bands of an amplified banded
// matrix-factorization mechanism as in App. F.4 of Choquette-Choo et al.
// (2023): for each candidate it calibrates sigma to (eps, delta) for
// BandMFEvent and scores sigma^2 * Loss; the smallest score wins.
// Candidates whose subsets are smaller than the batch (no amplification
// possible) are reported in the table but not chosen.
func SelectBands(acct Accountant, eps, delta float64, examples, batch, steps int, candidates []BandCandidate) (BandSelection, error) {
	if len(candidates) == 0 {
		return BandSelection{}, invalidf("SelectBands: no candidates")
	}
	sel := BandSelection{Best: -1, Table: make([]BandChoice, len(candidates))}
	for i, c := range candidates {
		row := BandChoice{BandCandidate: c}
		if !(c.Loss > 0) || isInf(c.Loss) {
			return BandSelection{}, invalidf("SelectBands: candidate %d: loss %v, want finite and > 0", c.Bands, c.Loss)
		}
		q, comps, err := bandParams(examples, batch, c.Bands, steps)
		if err != nil {
			if !errors.Is(err, dpcore.ErrInvalid) || c.Bands <= 0 {
				return BandSelection{}, fmt.Errorf("SelectBands: %w", err)
			}
			row.Err = err.Error()
			sel.Table[i] = row
			continue
		}
		row.Q, row.Compositions = q, comps
		cal, err := Calibrate(acct, func(s float64) (Event, error) {
			return BandMFEvent(s, examples, batch, c.Bands, steps)
		}, eps, delta)
		if err != nil {
			return BandSelection{}, fmt.Errorf("SelectBands: %d bands: %w", c.Bands, err)
		}
		row.Sigma, row.Epsilon = cal.Sigma, cal.Epsilon
		row.Score = cal.Sigma * cal.Sigma * c.Loss
		if sel.Best < 0 || row.Score < sel.Table[sel.Best].Score {
			sel.Best = i
		}
		sel.Table[i] = row
	}
	if sel.Best < 0 {
		return sel, fmt.Errorf("SelectBands: no candidate can be amplified (need bands <= examples/batch): %w", ErrInfeasible)
	}
	return sel, nil
}
