package privacy

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/noise"
)

// The plan of a continual release (package aggregate): a service releases
// the workload of a vector sum at every step of a horizon, with the noise
// of a matrix-factorization mechanism, and enforces the participation
// itself. ReleaseRequest says what is asked (horizon, participation,
// epsilon, delta and the mechanism); PlanRelease returns the noise
// multiplier, the sensitivity and the ledger's claim, and refuses what
// does not hold. The aggregator keeps no rule of its own.

// Participation is the contribution rule of a continual release: each
// contributor joins at most K steps, any two at least B steps apart.
type Participation struct {
	K, B int
}

// Schema is the participation schema Participation realizes: single
// participation for K = 1, else (K,B)-min-separation.
func (p Participation) Schema() (dpcore.Schema, error) {
	if p.K < 1 || p.B < 1 {
		return dpcore.Schema{}, invalidf("participation k = %d, b = %d: both must be at least 1", p.K, p.B)
	}
	if p.K == 1 {
		return dpcore.SingleParticipation(), nil
	}
	s, err := dpcore.MinSepParticipation(p.K, p.B)
	if err != nil {
		return dpcore.Schema{}, fmt.Errorf("privacy: %w", err)
	}
	return s, nil
}

// Rules of Admit's refusals, beside RuleHorizon.
const (
	// RuleParticipationLimit: the contributor already joined K steps.
	RuleParticipationLimit Rule = "participation-limit"
	// RuleSeparation: the contributor joined a step less than B steps
	// before.
	RuleSeparation Rule = "separation"
)

// Admit is the rule a contribution to step t obeys: a contributor that
// joined the steps joined (increasing) may join t if it joined fewer than
// K steps and the last at least B steps before t. It returns nil or a
// *Refusal with Rule RuleParticipationLimit or RuleSeparation.
func (p Participation) Admit(joined []int, t int) error {
	if len(joined) >= p.K {
		return refuse(RuleParticipationLimit, "already joined %d steps (limit k = %d)", len(joined), p.K)
	}
	if len(joined) > 0 {
		if last := joined[len(joined)-1]; t-last < p.B {
			return refuse(RuleSeparation, "joined step %d, step %d is %d steps later (need b = %d)", last, t, t-last, p.B)
		}
	}
	return nil
}

// Lattice is how the exact arithmetic of a release rounds (docs/math.md,
// "Exact arithmetic of the release"): the encoder's entries on a grid of
// 2^-EncoderBits, each moved by at most EncoderError, and records on a
// grid of clip/2^GridBits with L2 norm at most NormGrid grid units.
type Lattice struct {
	EncoderBits  int
	EncoderError float64
	GridBits     int
	NormGrid     float64
}

// ReleaseRequest is what a release plan is made from.
type ReleaseRequest struct {
	// Mechanism names the mechanism for the ledger.
	Mechanism string
	// Strategy is the mechanism A = B C; its Steps are the horizon, the
	// number of releases the budget covers. The exact arithmetic (Lattice)
	// reads its dense matrices.
	Strategy      dpcore.Strategy
	Participation Participation
	// Epsilon and Delta are the target guarantee over the whole horizon.
	Epsilon, Delta float64
	// Lattice is the exact arithmetic's rounding: the noise is a discrete
	// Gaussian on the integer encoded sums. Nil means float arithmetic
	// (continuous Gaussian noise added in floating point: tests only, open
	// to Mironov's attack).
	Lattice *Lattice
	// Seeded says the noise comes from a fixed seed (tests only): the
	// claim then says the releases are not covered.
	Seeded bool
	// CalibrationV1 asks, with a Lattice, for the noise multiplier of
	// stores made before issue 43 (accountant.DiscreteGaussianSigmaV1,
	// zCDP alone), so that such a store reopens with the noise it drew.
	// The accounting of the releases is today's either way.
	CalibrationV1 bool
}

// ReleasePlan is the privacy claim of a continual release, fixed before
// the first release: the noise multiplier calibrated to (Epsilon, Delta)
// over the horizon, the sensitivity of the mechanism's encoder under the
// participation schema, the accounting and the assumptions.
type ReleasePlan struct {
	Mechanism     string
	Horizon       int
	Participation Participation
	Schema        dpcore.Schema
	// Sensitivity is sens(C) under Schema, for records of norm 1.
	Sensitivity dpcore.SensitivityResult
	// NoiseSensitivity is the sensitivity the noise is scaled to:
	// Sensitivity.Value in float arithmetic; with a Lattice, a bound on
	// the sensitivity of the rounded encoder (SPEC: sens(C) + K sqrt(m)
	// times the rounding, with 1e-9 for sens(C)'s float evaluation).
	NoiseSensitivity float64
	// NoiseMultiplier is sigma: one Gaussian mechanism (discrete with a
	// Lattice) with sensitivity 1 at sigma has (Epsilon, Delta).
	NoiseMultiplier float64
	Epsilon, Delta  float64
	// Accountant is the accounting rule, for the ledger.
	Accountant string
	Lattice    *Lattice
	Seeded     bool

	s             dpcore.Strategy
	calibrationV1 bool       // ReleaseRequest.CalibrationV1
	rows          int        // m, the encoder's rows, with a Lattice
	mu            sync.Mutex // guards prefixSens
	prefixSens    map[int]float64
}

// GaussianAccounting names the float release's accounting in ledgers.
const GaussianAccounting = "gaussian-exact (Balle & Wang 2018): one Gaussian mechanism with sensitivity 1 at noise multiplier sigma"

// PlanRelease checks r and calibrates its noise: the sensitivity of the
// encoder under the participation's schema, and the smallest noise
// multiplier at which one Gaussian mechanism (discrete Gaussian on the
// lattice) of sensitivity 1 has (Epsilon, Delta). A sensitivity that is
// not a positive number is refused (RuleSensitivity).
func PlanRelease(r ReleaseRequest) (*ReleasePlan, error) {
	s := r.Strategy
	if s == nil {
		return nil, invalidf("release %s: no mechanism", r.Mechanism)
	}
	n := s.Steps()
	if n < 1 {
		return nil, invalidf("horizon %d, want >= 1", n)
	}
	if !(r.Epsilon > 0) || math.IsInf(r.Epsilon, 0) {
		return nil, invalidf("epsilon %v, want a positive finite number", r.Epsilon)
	}
	if !(r.Delta > 0 && r.Delta < 1) {
		return nil, invalidf("delta %v, want in (0,1)", r.Delta)
	}
	schema, err := r.Participation.Schema()
	if err != nil {
		return nil, err
	}
	p := &ReleasePlan{Mechanism: r.Mechanism, Horizon: n, Participation: r.Participation, Schema: schema,
		Epsilon: r.Epsilon, Delta: r.Delta, Lattice: r.Lattice, Seeded: r.Seeded, s: s, prefixSens: map[int]float64{},
		calibrationV1: r.CalibrationV1 && r.Lattice != nil}
	if r.Lattice != nil {
		if g := r.Lattice.NormGrid; !(g >= 1) || math.IsInf(g, 0) {
			return nil, invalidf("release %s: lattice norm %v grid units, want finite and >= 1", r.Mechanism, g)
		}
		if p.rows, err = mfnoise.EncoderRows(s); err != nil {
			return nil, fmt.Errorf("privacy: release %s: %w", r.Mechanism, err)
		}
	}
	if p.Sensitivity, err = s.Sensitivity(schema); err != nil {
		return nil, refuse(RuleSensitivity, "mechanism %s: sensitivity under %s cannot be computed: %v", r.Mechanism, schema, err)
	}
	if v := p.Sensitivity.Value; !(v > 0) || math.IsInf(v, 0) {
		return nil, refuse(RuleSensitivity, "mechanism %s: sensitivity %v under %s is not a positive number", r.Mechanism, v, schema)
	}
	p.NoiseSensitivity = p.noiseSensitivity(p.Sensitivity.Value)
	if r.Lattice == nil {
		p.Accountant = GaussianAccounting
		p.NoiseMultiplier, err = accountant.GaussianSigma(r.Epsilon, r.Delta)
	} else {
		p.Accountant = accountant.DiscreteGaussianAccounting
		if r.CalibrationV1 {
			p.NoiseMultiplier, err = accountant.DiscreteGaussianSigmaV1(r.Epsilon, r.Delta)
		} else {
			p.NoiseMultiplier, err = accountant.DiscreteGaussianSigma(r.Epsilon, r.Delta, p.integerSensitivity(p.NoiseSensitivity))
		}
	}
	if err != nil {
		return nil, calibrationError("calibrating sigma", r.Epsilon, err)
	}
	return p, nil
}

// noiseSensitivity is the bound on the sensitivity of the released
// encoder rows whose float64 sensitivity is s: s itself in float
// arithmetic; on the lattice, each entry moved by at most EncoderError
// (0 when C is on the grid) and at most K columns of records of norm <= 1
// differ, so sens(c~ 2^-bits) <= s + K sqrt(m) EncoderError, and 1e-9
// covers the float64 evaluation of s.
func (p *ReleasePlan) noiseSensitivity(s float64) float64 {
	if p.Lattice == nil {
		return s
	}
	return s*(1+1e-9) + float64(p.Participation.K)*math.Sqrt(float64(p.rows))*p.Lattice.EncoderError
}

// integerSensitivity is the L2 sensitivity, in units of the lattice, of
// the integer encoded sums c~ X~ whose rounded encoder has sensitivity at
// most s (NoiseSensitivity): s 2^EncoderBits NormGrid. The discrete
// Gaussian's noise is N_Z(0, (sigma s 2^EncoderBits NormGrid)^2), and its
// accounting depends on that scale, not only on sigma.
func (p *ReleasePlan) integerSensitivity(s float64) float64 {
	return s * math.Ldexp(p.Lattice.NormGrid, p.Lattice.EncoderBits)
}

// Admit checks a contribution to step t by a contributor that joined the
// steps joined: refused past the horizon (RuleHorizon) and by the
// participation (Participation.Admit).
func (p *ReleasePlan) Admit(joined []int, t int) error {
	if t > p.Horizon {
		return refuse(RuleHorizon, "all %d releases of the horizon are made", p.Horizon)
	}
	return p.Participation.Admit(joined, t)
}

// EpsilonSpent is the epsilon spent by the first t releases: the Gaussian
// mechanism's epsilon at noise multiplier sigma * S / S_g, where S is
// NoiseSensitivity and S_g the (noise) sensitivity of the first g
// releases, g the smallest power of two >= t (or the horizon): an upper
// bound on the sensitivity of the first t releases. It never exceeds
// Epsilon; 0 before the first release.
func (p *ReleasePlan) EpsilonSpent(ctx context.Context, t int) (float64, error) {
	if t <= 0 {
		return 0, nil
	}
	g := 1
	for g < t {
		g *= 2
	}
	g = min(g, p.Horizon)
	s, err := p.prefixSensitivity(ctx, g)
	if err != nil {
		return 0, err
	}
	if s <= 0 {
		return 0, nil
	}
	var eps float64
	if p.Lattice != nil {
		sq := math.Min(p.noiseSensitivity(s), p.NoiseSensitivity)
		eps, err = accountant.DiscreteGaussianEpsilon(p.NoiseMultiplier*p.NoiseSensitivity/sq, p.Delta, p.integerSensitivity(sq))
	} else {
		eps, err = accountant.GaussianEpsilon(p.NoiseMultiplier*p.Sensitivity.Value/s, p.Delta)
	}
	if err != nil {
		return 0, accountingError("ledger", err)
	}
	return min(eps, p.Epsilon), nil
}

// prefixSensitivity is PrefixSensitivity, remembered per t.
func (p *ReleasePlan) prefixSensitivity(ctx context.Context, t int) (float64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.prefixSens[t]; ok {
		return s, nil
	}
	s, err := p.PrefixSensitivity(ctx, t)
	if err != nil {
		return 0, err
	}
	p.prefixSens[t] = s
	return s, nil
}

// PrefixSensitivity is an upper bound on the sensitivity of the first t
// releases alone, nondecreasing in t and at most Sensitivity.Value
// (mfnoise.PrefixSensitivity: the rows of the encoder the first t rows of
// the decoder read).
func (p *ReleasePlan) PrefixSensitivity(ctx context.Context, t int) (float64, error) {
	s, err := mfnoise.PrefixSensitivity(ctx, p.s, p.Schema, t, p.Sensitivity.Value)
	if err != nil {
		return 0, fmt.Errorf("privacy: release %s: %w", p.Mechanism, err)
	}
	return s, nil
}

// Strategy is the plan's mechanism.
func (p *ReleasePlan) Strategy() dpcore.Strategy { return p.s }

// NoiseSource is a fresh unit-scale noise source of dimension d for the
// plan's mechanism (noise.New picks how to stream it): the float
// release's noise.
func (p *ReleasePlan) NoiseSource(d int, opt noise.Options) (noise.Source, error) {
	return noise.New(p.s, d, opt)
}

// ReleaseClaim is what a continual release's ledger states besides its
// counters: the accounting and every assumption the guarantee rests on.
type ReleaseClaim struct {
	Accountant  string
	Arithmetic  string // "exact" or "float"
	Covered     bool   // false when a fixed seed makes the noise known
	Assumptions []string
}

// Claim is the ledger's statement of the release, whose records (with the
// count coordinate, if any) have L2 norm at most recordNorm after
// clipping to clip.
func (p *ReleasePlan) Claim(clip, recordNorm float64) ReleaseClaim {
	c := ReleaseClaim{Accountant: p.Accountant, Arithmetic: "float", Covered: !p.Seeded}
	mech := fmt.Sprintf("unamplified accounting: one Gaussian mechanism with sensitivity %.6g (%s) over the horizon of %d releases; epsilon spent after t releases uses the sensitivity of the first g releases, g the next power of two", p.Sensitivity.Value, p.Sensitivity.Method, p.Horizon)
	if l := p.Lattice; l != nil {
		c.Arithmetic = "exact"
		mech = fmt.Sprintf("unamplified accounting: one multivariate discrete Gaussian mechanism on the integer encoded sums c~ X~ (encoder on a grid of 2^-%d, sensitivity %.6g >= that of the mechanism's encoder, %.6g (%s), plus the encoder's rounding; records on a grid of clip/2^%d with L2 norm at most %.6g grid units, enforced exactly) over the horizon of %d releases; epsilon spent after t releases uses the sensitivity of the first g releases, g the next power of two",
			l.EncoderBits, p.NoiseSensitivity, p.Sensitivity.Value, p.Sensitivity.Method, l.GridBits, l.NormGrid, p.Horizon)
		sens := p.integerSensitivity(p.NoiseSensitivity)
		rule := "zCDP (Canonne, Kamath & Steinke 2020, Prop. 12 at its optimal order)"
		zc, _ := accountant.ZCDPEpsilon(accountant.ZCDPRho(p.NoiseMultiplier), p.Delta)
		if p.calibrationV1 {
			rule = "zCDP as calibrated before issue 43 (the store was made then and keeps its noise; epsilon spent is today's accounting)"
		} else if e, err := accountant.DiscreteGaussianEpsilon(p.NoiseMultiplier, p.Delta, sens); err == nil && e < zc {
			rule = "the continuous Gaussian's exact curve at the smoothed multiplier sqrt(s^2 - 16)/Delta (the discrete Gaussian is, to a factor e^(+-1e-116), a post-processing of that continuous one)"
		}
		mech += fmt.Sprintf("; noise N_Z(0, s^2) on every coordinate, s = sigma Delta with the encoded sums' integer L2 sensitivity Delta = %.6g, for every integer shift of norm at most Delta, whatever its direction; the accounting that gives sigma: %s", sens, rule)
	}
	c.Assumptions = []string{
		"adjacency: " + string(accountant.ZeroOut) + ": all contributions of one contributor id replaced by zero; the unit of privacy is one contributor id",
		fmt.Sprintf("participation: each contributor id joins at most k = %d steps, any two at least b = %d apart (%s), enforced by the aggregator", p.Participation.K, p.Participation.B, p.Schema),
		fmt.Sprintf("contributions clipped to L2 norm %g (record norm %g with the count coordinate)", clip, recordNorm),
		mech,
		"decoding and the workload (prefix, momentum-weighted or windowed sums, count, mean) are post-processing (Denisov et al. 2022, Thm 2.1)",
		"contributions_accepted, contributions_rejected and contributions_clipped are exact operational counters, not covered by the guarantee",
	}
	if p.Seeded {
		c.Assumptions = append(c.Assumptions, "noise: NOT private: a fixed seed was given (for tests only); anyone with the seed can remove the noise, so the releases are not covered by the guarantee")
	} else {
		c.Assumptions = append(c.Assumptions, accountant.AssumeNoise+" (seeded from crypto/rand)")
	}
	return c
}
