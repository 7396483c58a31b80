package privacy

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/sampler"
)

// Sampling names how batches are drawn (SPEC 7).
type Sampling string

const (
	// SamplingAuto picks by the mechanism's structure (Structure.Sampling):
	// Poisson for DP-SGD, partitioned band sampling for a banded encoder,
	// fixed-order epochs otherwise.
	SamplingAuto Sampling = ""
	// SamplingPoisson: every example joins each step with probability
	// q = Batch/m; amplified DP-SGD accounting.
	SamplingPoisson Sampling = "poisson"
	// SamplingBandPoisson: banded-MF Alg. 2, amplified BandMF accounting.
	SamplingBandPoisson Sampling = "band-poisson"
	// SamplingFixedOrder: shuffle once, same batches every epoch;
	// (k,b)-participation, unamplified accounting.
	SamplingFixedOrder Sampling = "fixed-order"
	// SamplingShuffle: a fresh permutation every epoch; no amplification is
	// claimed.
	SamplingShuffle Sampling = "shuffle"
	// SamplingRandomAllocation: every epoch each example joins exactly one
	// of its floor(m/B) steps, drawn uniformly and independently (batch
	// sizes vary); amplified accounting for DP-SGD only (random allocation,
	// Feldman and Shenfeld 2025), refused for correlated noise.
	SamplingRandomAllocation Sampling = "random-allocation"
	// SamplingBandAllocation: band-poisson's partitions with random
	// allocation within each (sampler.NewBandAllocation); amplified
	// accounting for an encoder with at most as many bands as partitions
	// (docs/math.md, section 7.1). The band count must be given
	// (bandmf:B, toeplitz:B), not chosen by auto.
	SamplingBandAllocation Sampling = "band-allocation"
)

// Request is what a plan is made from. Examples, Batch, Steps and
// Mechanism are required, and one of NoiseMultiplier and Epsilon.
type Request struct {
	Mechanism Mechanism
	// Workload is the map the optimizer applies to the gradient stream over
	// Steps steps (optim.Optimizer.Workload). The zero value is prefix
	// sums, which independent noise always uses.
	Workload dpcore.Workload
	// Examples is m, the number of units sampled from: examples, or
	// users when Unit is UnitUser.
	Examples int
	Batch    int // expected batch size B
	Steps    int // n
	Sampling Sampling
	// Partitions is the number of partitions of band sampling; 0 means the
	// mechanism's band count.
	Partitions int
	// ClipNorm is zeta, the bound on each example's gradient norm.
	ClipNorm float64
	// NoiseMultiplier sigma, or 0 to calibrate it to Epsilon.
	NoiseMultiplier float64
	Epsilon         float64
	// Delta; 0 means DefaultDelta(Examples).
	Delta      float64
	Accountant AccountantKind
	// Seed derives the sampler's seed (DeriveSeed); nil draws it from
	// crypto/rand. NoiseAssumptions states what a seed means for the
	// claim and refuses a weak one unless InsecureSeed is set.
	Seed         []byte
	InsecureSeed bool
	// NotCovered names outputs the caller reports that are computed from
	// private data without noise; the ledger lists them as outside the
	// guarantee.
	NotCovered []string
	// Preprocessing names per-example transforms of the data fixed in
	// advance (no statistic of the data set enters them), e.g. a
	// scattering transform; PostProcessing names functions of the
	// released noisy sums only, e.g. parameter averaging. The ledger
	// lists both, so the claim states everything the run did.
	Preprocessing  []string
	PostProcessing []string
	// Build configures factorization (cache, optimizer settings).
	Build mfnoise.BuildOptions
	// CacheDir, when Build has no cache, is the directory of the
	// factorization cache (mfnoise.Cache); "" means no caching.
	CacheDir string
	// Unit is the unit of privacy ("": UnitExample). A user-level plan
	// needs UserBound, or it is refused.
	Unit      Unit
	UserBound *UserBound
	// MaxOwnerExamples, for an example-level plan over data whose
	// examples have owners, is the most examples one owner holds: the
	// claim then states what it means per owner (group privacy).
	MaxOwnerExamples int
	// Quantile, when set, is adaptive clipping's private quantile
	// estimate (quantile.go); ClipNorm is then the initial clip norm.
	Quantile *QuantileRelease
}

// Plan is the privacy claim of a run, fixed before the first step: which
// sampler realizes which participation schema, which mechanism adds noise
// with which sensitivity, and which accounting event that amounts to.
// NewPlan refuses every combination whose guarantee does not hold.
type Plan struct {
	Mechanism string `json:"mechanism"`
	// Unit is the unit of privacy, example or user; UserBound is a
	// user-level plan's per-user contribution bound.
	Unit        Unit                     `json:"unit"`
	UserBound   *UserBound               `json:"user_bound,omitempty"`
	Bands       int                      `json:"bands,omitempty"`
	Workload    string                   `json:"workload"`
	Sampling    Sampling                 `json:"sampling"`
	Schema      dpcore.Schema            `json:"schema"`
	Sensitivity dpcore.SensitivityResult `json:"sensitivity"`
	// Accounting is what the sampler supports; Amplified says the plan
	// claims amplification by sampling.
	Accounting      sampler.Accounting `json:"accounting"`
	Amplified       bool               `json:"amplified"`
	NoiseMultiplier float64            `json:"noise_multiplier"`
	// ClipNorm is zeta.
	ClipNorm float64 `json:"clip_norm"`
	// NoiseStd is sigma * zeta * sens: the standard deviation of the noise
	// added to the clipped gradient sum (before dividing by the batch).
	NoiseStd   float64        `json:"noise_std"`
	Epsilon    float64        `json:"epsilon"`
	Delta      float64        `json:"delta"`
	Accountant AccountantKind `json:"accountant"`
	Calibrated bool           `json:"calibrated"`
	// Loss is sens^2 ||B||_F^2 at the plan's sensitivity.
	Loss      float64                   `json:"mechanism_loss,omitempty"`
	BandTable *accountant.BandSelection `json:"band_selection,omitempty"`
	// DefaultSampling says how Sampling was chosen when the request named
	// none and the mechanism chooses its bands (chooseSampling); nil
	// otherwise (the caller's sampling, or the mechanism's by structure).
	DefaultSampling *SamplingChoice `json:"default_sampling,omitempty"`
	// Seeded says the noise comes from a caller's seed, not crypto/rand:
	// anyone who has the seed can reproduce it.
	Seeded bool `json:"seeded"`
	// Quantile is adaptive clipping's count release (nil: a fixed clip
	// norm); GradientNoiseMultiplier is then the gradient's own noise
	// multiplier (QuantileRelease.GradientSigma), and NoiseStd holds at
	// the initial ClipNorm and scales with the clip norm of each step.
	Quantile                *QuantileRelease `json:"adaptive_clipping,omitempty"`
	GradientNoiseMultiplier float64          `json:"gradient_noise_multiplier,omitempty"`
	// NotCovered names the run's outputs the guarantee does not cover.
	NotCovered []string `json:"not_covered,omitempty"`
	// Ledger is the auditable record: the accounting event, accountant
	// settings, parameters, the adjacency, every assumption and
	// (epsilon, delta).
	Ledger accountant.LedgerEntry `json:"ledger"`

	mechanism Mechanism
	workload  dpcore.Workload
	// strategy is the built mechanism, dense or O(n).
	strategy    dpcore.Strategy
	composition Composition
	acct        accountant.Accountant
	steps       int

	mu    sync.Mutex
	spent map[int]float64 // epsilon after a grid point's compositions
}

// Assumptions are what the guarantee rests on: the ledger's list.
func (p *Plan) Assumptions() []string { return p.Ledger.Assumptions }

// Strategy is the built mechanism: its encoder and decoder, dense or in
// the O(n) description of a Toeplitz mechanism.
func (p *Plan) Strategy() dpcore.Strategy { return p.strategy }

// NoiseSource is a fresh unit-scale noise source of dimension d for the
// plan's mechanism (noise.New picks how to stream it).
func (p *Plan) NoiseSource(d int, opt noise.Options) (noise.Source, error) {
	if p.strategy == nil {
		return nil, invalidf("plan has no mechanism")
	}
	return noise.New(p.strategy, d, opt)
}

// PrefixSensitivity is an upper bound on the sensitivity of the first t
// releases alone under the plan's accounting (per participation when
// amplified, else the schema's), nondecreasing in t and at most the
// plan's Sensitivity (mfnoise.PrefixSensitivity; it reads the dense
// encoder and decoder).
func (p *Plan) PrefixSensitivity(ctx context.Context, t int) (float64, error) {
	schema := p.Schema
	if p.Amplified {
		schema = dpcore.SingleParticipation()
	}
	return mfnoise.PrefixSensitivity(ctx, p.strategy, schema, t, p.Sensitivity.Value)
}

// Factorization is the mechanism's dense factorization, for the code that
// reads the encoder (the white-box audit): an O(n) mechanism's is built
// here on demand, and refused above dpcore.DenseStepLimit steps.
func (p *Plan) Factorization() (*mfnoise.Factorization, error) {
	return mfnoise.Dense(p.strategy)
}

// Composition is the plan's accounting event as a function of sigma and the
// steps done.
func (p *Plan) Composition() Composition { return p.composition }

// DeriveSeed gives each consumer of a run's randomness (sampler, noise,
// model initialization, augmentation) its own 32-byte seed from the run's
// seed, or nil (crypto/rand) when the run has none.
func DeriveSeed(master []byte, label string) *dpcore.Seed {
	return dpcore.DeriveSeed(master, label)
}

func (r *Request) check() error {
	switch {
	case r.Mechanism == nil:
		return invalidf("no mechanism")
	case r.Examples <= 0 || r.Steps <= 0:
		return invalidf("examples = %d and steps = %d must be positive", r.Examples, r.Steps)
	case r.Batch <= 0 || r.Batch > r.Examples:
		return invalidf("batch = %d must lie in [1, %d examples]", r.Batch, r.Examples)
	case !(r.ClipNorm > 0) || math.IsInf(r.ClipNorm, 0):
		return invalidf("clip norm %v must be positive and finite", r.ClipNorm)
	case r.NoiseMultiplier < 0 || math.IsNaN(r.NoiseMultiplier) || math.IsInf(r.NoiseMultiplier, 0):
		return invalidf("noise multiplier %v", r.NoiseMultiplier)
	case r.NoiseMultiplier == 0 && !(r.Epsilon > 0 && !math.IsInf(r.Epsilon, 0)):
		return invalidf("give a target epsilon > 0 or a noise multiplier (epsilon = %v)", r.Epsilon)
	case r.Delta != 0 && !(r.Delta > 0 && r.Delta < 1):
		return invalidf("delta %v must lie in (0,1)", r.Delta)
	case r.Partitions < 0:
		return invalidf("partitions = %d", r.Partitions)
	}
	return nil
}

// NewPlan binds mechanism, sampler and accounting, and returns the plan and
// the sampler that realizes it. The rules, in order: the sampling follows
// the mechanism's structure unless chosen (for bandmf:auto and
// toeplitz:auto, the regime whose band choice adds the less noise, band
// sampling or fixed-order epochs: chooseSampling); bandmf:auto and toeplitz:auto
// pick their bands by amplified accounting under band sampling
// (banded-MF App. F.4) and by their loss under the sampler's schema under
// fixed-order epochs or shuffling (resolveBands, bands.go), and the
// chosen count is then planned as bandmf:B or toeplitz:B would be; amplification is claimed only
// by Poisson, band, random-allocation or band-allocation sampling and only
// for a banded encoder with no more bands than the sampler separates
// participations (banded-MF Thm 4, docs/math.md 7.1; DP-SGD is 1-banded;
// random allocation over all examples for DP-SGD only); an optimizer's schema must be realized; sensitivity
// is per participation (the largest column norm) when amplified, else for
// the sampler's whole schema; sigma is given or calibrated; the seed is
// stated and a weak one refused.
func NewPlan(ctx context.Context, r Request) (*Plan, sampler.Sampler, error) {
	p, pre, err := r.start()
	if err != nil {
		return nil, nil, err
	}
	mech, prebuilt, err := p.resolveBands(ctx, r, r.Mechanism)
	if err != nil {
		return nil, nil, err
	}
	s, as, err := p.bindSampler(r, mech)
	if err != nil {
		return nil, nil, err
	}
	if p.strategy, err = build(ctx, mech, p.workload, p.Schema, r.Build, prebuilt); err != nil {
		return nil, nil, err
	}
	if err := p.checkEncoderBands(mech); err != nil {
		return nil, nil, err
	}
	sensNote, err := p.sensitivity(r)
	if err != nil {
		return nil, nil, err
	}
	as = append(append(pre.unitNotes, as...), sensNote)
	as = append(as, r.processingAssumptions()...)
	p.Seeded = r.Seed != nil
	as = append(as, pre.noiseOrigin...)
	if len(r.NotCovered) > 0 {
		p.NotCovered = r.NotCovered
		as = append(as, "not covered by the guarantee (computed from private data without noise; keep them as private as the data): "+strings.Join(r.NotCovered, "; "))
	}
	if err := p.setQuantile(r.Quantile); err != nil {
		return nil, nil, err
	}
	if err := p.calibrate(ctx, r); err != nil {
		return nil, nil, err
	}
	if as, err = p.quantileNoise(as); err != nil {
		return nil, nil, err
	}
	if err := p.writeLedger(r, as); err != nil {
		return nil, nil, err
	}
	return p, s, nil
}

// CheckRequest refuses, with the error NewPlan would give, a request
// NewPlan refuses before it builds a factorization or calibrates the
// noise: the request's own values, the accountant, the seed, the unit,
// the sampling and the rules binding it to the mechanism (more bands than
// steps, a (k,b) schema without fixed-order sampling, amplification of an
// encoder that is not banded). For bandmf:auto and toeplitz:auto only the
// refusals that come before the band counts are compared. A caller that
// starts other processes before planning (the workers of a distributed
// run) checks with it first; a request it accepts may still be refused
// by NewPlan (calibration, an encoder's band structure).
func CheckRequest(r Request) error {
	p, _, err := r.start()
	if err != nil {
		return err
	}
	if _, ok := r.Mechanism.(mfnoise.AutoBanded); ok && r.Mechanism.Structure().AutoBands {
		return p.checkAutoBands(r, r.Mechanism)
	}
	_, _, err = p.bindSampler(r, r.Mechanism)
	return err
}

// preamble is what the plan's first step finds about the request besides
// the plan itself: the assumptions of the unit of privacy and of the
// noise's origin.
type preamble struct{ unitNotes, noiseOrigin []string }

// start checks the request and begins the plan: accountant, delta, unit,
// the workload (prefix sums for independent noise) and the sampling (the
// mechanism's structure unless chosen).
func (r *Request) start() (*Plan, preamble, error) {
	var pre preamble
	if err := r.check(); err != nil {
		return nil, pre, err
	}
	if r.Build.Cache == nil && r.CacheDir != "" {
		r.Build.Cache = &mfnoise.Cache{Dir: r.CacheDir}
	}
	acct, err := r.Accountant.New()
	if err != nil {
		return nil, pre, err
	}
	if pre.noiseOrigin, err = NoiseAssumptions(r.Seed, r.InsecureSeed); err != nil {
		return nil, pre, err
	}
	if pre.unitNotes, err = r.unitAssumptions(); err != nil {
		return nil, pre, err
	}
	n := r.Steps
	delta := r.Delta
	if delta == 0 {
		delta = DefaultDelta(r.Examples)
	}
	st := r.Mechanism.Structure()
	w := r.Workload
	if w.N == 0 || st.Independent {
		w, _ = dpcore.PrefixSum(n)
	}
	if w.N != n {
		return nil, pre, invalidf("workload over %d steps for a run of %d", w.N, n)
	}
	p := &Plan{Workload: w.String(), workload: w, Delta: delta, Accountant: AccountantKind(acct.Name()), ClipNorm: r.ClipNorm, acct: acct, steps: n, Unit: UnitExample}
	if r.Unit == UnitUser {
		b := *r.UserBound
		p.Unit, p.UserBound = UnitUser, &b
	}
	p.Sampling = r.Sampling
	if p.Sampling == SamplingAuto {
		p.Sampling = samplingFor(st)
	}
	if p.Sampling == SamplingRandomAllocation && (st.Bands != 1 || st.AutoBands) {
		return nil, pre, refuse(RuleAmplification, "%s with %s sampling: random allocation over all examples is accounted only for DP-SGD (dpsgd); a banded mechanism needs band-allocation sampling, and no proof covers other mechanisms (docs/math.md, section 7.1)", r.Mechanism, p.Sampling)
	}
	if p.Sampling == SamplingBandAllocation && st.Bands == 0 && !st.AutoBands {
		return nil, pre, refuse(RuleAmplification, "%s with %s sampling: only a banded encoder (dpsgd, bandmf:B, toeplitz:B, or bandmf:auto and toeplitz:auto, which choose B) has amplified accounting under random allocation (docs/math.md, section 7.1)", r.Mechanism, p.Sampling)
	}
	return p, pre, nil
}

// bindSampler makes the sampler that realizes the plan's sampling for
// mech and applies the rules that bind them: amplification only by
// Poisson or band sampling and only for a banded encoder with no more
// bands than the sampler separates participations (banded-MF Thm 4), and
// an optimizer's (k,b) schema only under fixed-order sampling. It returns
// the sampler and the accounting's assumptions.
func (p *Plan) bindSampler(r Request, mech Mechanism) (sampler.Sampler, []string, error) {
	st := mech.Structure()
	n := r.Steps
	p.mechanism, p.Mechanism = mech, mech.String()
	if st.Bands > n {
		return nil, nil, invalidf("%s has %d bands, more than the %d steps", mech, st.Bands, n)
	}
	if _, ok := mech.(mfnoise.BandMF); ok {
		p.Bands = st.Bands
	}
	partitions := r.Partitions
	if partitions == 0 {
		partitions = max(st.Bands, 1)
	}
	s, err := newSampler(p.Sampling, r.Examples, r.Batch, partitions, n, DeriveSeed(r.Seed, "sampler"))
	if err != nil {
		return nil, nil, err
	}
	p.Schema = s.Schema()
	p.Accounting = s.Accounting()
	p.Amplified = p.Accounting.Kind == sampler.AccountingPoisson || p.Accounting.Kind == sampler.AccountingBandPoisson ||
		p.Accounting.Kind == sampler.AccountingRandomAllocation
	if st.FixedOrderOnly && p.Sampling != SamplingFixedOrder {
		return nil, nil, refuse(RuleSampling, "%s is optimized for (k,b)-participation, which only fixed-order sampling realizes, not %s sampling (%s)", mech, p.Sampling, p.Schema)
	}
	if p.Amplified && st.Bands == 0 {
		return nil, nil, refuse(RuleAmplification, "%s with %s sampling: only banded encoders (dpsgd, bandmf) have amplified accounting; %s's encoder is not banded — use fixed-order sampling (unamplified)", mech, p.Sampling, mech)
	}
	// Unamplified sensitivity is computed for the sampler's own schema
	// without relying on banding (bands 0); amplified accounting relies on
	// the band structure.
	checkBands := 0
	if p.Amplified {
		checkBands = st.Bands
	}
	if err := CheckCompatible(s, p.Schema, checkBands, p.Amplified); err != nil {
		return nil, nil, err
	}
	return s, p.Accounting.Assumptions, nil
}

// checkEncoderBands verifies, for an amplified plan, the band count the
// accounting relies on (banded-MF Thm 4: at most as many bands as the
// sampler's partitions, which bindSampler checked for the declared count)
// against the encoder actually built or read from the cache: its nonzero
// structure (mfnoise.EncoderBands) must be lower triangular with at most
// the declared bands.
func (p *Plan) checkEncoderBands(mech Mechanism) error {
	if !p.Amplified {
		return nil
	}
	declared := mech.Structure().Bands
	got, err := mfnoise.EncoderBands(p.strategy)
	if err != nil {
		return refuse(RuleAmplification, "%s: the encoder's band structure cannot be read (%v), and amplified accounting relies on it", mech, err)
	}
	switch {
	case got == 0:
		return refuse(RuleAmplification, "%s declares %d bands, but its encoder is not lower triangular: amplified accounting does not hold", mech, declared)
	case got > declared:
		return refuse(RuleAmplification, "%s declares %d bands, but its encoder (built or cached) has %d: amplified accounting with %d partitions does not hold for it", mech, declared, got, max(p.Accounting.Bands, 1))
	}
	return nil
}

// sensitivity sets the plan's sensitivity and accounting event: per
// participation (the largest column norm of C) when amplified, else under
// the sampler's whole schema. It returns the assumption that states it.
func (p *Plan) sensitivity(r Request) (string, error) {
	if p.Amplified {
		// Each participation sees one column of C: the per-participation
		// sensitivity is the largest column norm.
		sens, err := p.strategy.Sensitivity(dpcore.SingleParticipation())
		if err != nil {
			return "", fmt.Errorf("privacy: %w", err)
		}
		p.Sensitivity = sens
		p.composition = Composition{Amplified: true, Q: p.Accounting.Q, Examples: r.Examples, Batch: r.Batch, Partitions: max(p.Accounting.Bands, 1),
			Allocation: p.Accounting.AllocationSize}
		return fmt.Sprintf("sensitivity: %.6g per participation (the largest column norm of C), the noise's unit", sens.Value), nil
	}
	sens, err := p.strategy.Sensitivity(p.Schema)
	if err != nil {
		return "", refuse(RuleSensitivity, "%s: sensitivity under %s cannot be computed: %v", p.mechanism, p.Schema, err)
	}
	p.Sensitivity = sens
	method := "exact"
	if !sens.Exact {
		method = "an upper bound"
	}
	return fmt.Sprintf("sensitivity: %.6g under %s (%s, %s), the noise's unit", sens.Value, p.Schema, sens.Method, method), nil
}

// processingAssumptions state what is post-processing and what per-example
// preprocessing the run did.
func (r *Request) processingAssumptions() []string {
	as := []string{"decoder and optimizer are post-processing (Denisov et al. Thm 2.1)"}
	if len(r.PostProcessing) > 0 {
		as = append(as, "also post-processing (functions of the released noisy sums only): "+strings.Join(r.PostProcessing, "; "))
	}
	if len(r.Preprocessing) > 0 {
		as = append(as, "per-example preprocessing fixed in advance (no statistic of the data set; adjacency unchanged): "+strings.Join(r.Preprocessing, "; "))
	}
	return as
}

// calibrate sets sigma (given, or calibrated to the target epsilon), the
// epsilon, the noise's standard deviation and the loss at the plan's
// sensitivity.
func (p *Plan) calibrate(ctx context.Context, r Request) error {
	var err error
	if r.NoiseMultiplier > 0 {
		p.NoiseMultiplier = r.NoiseMultiplier
		if p.Epsilon, err = p.composition.Epsilon(p.acct, p.NoiseMultiplier, p.steps, p.Delta); err != nil {
			return err
		}
	} else {
		cal, err := p.composition.Calibrate(ctx, p.acct, p.steps, r.Epsilon, p.Delta)
		if err != nil {
			return err
		}
		p.NoiseMultiplier, p.Epsilon, p.Calibrated = cal.Sigma, cal.Epsilon, true
	}
	p.NoiseStd = p.NoiseMultiplier * r.ClipNorm * p.Sensitivity.Value
	if p.Loss, err = dpcore.LossAt(p.strategy, p.Sensitivity.Value); err != nil {
		return fmt.Errorf("privacy: %w", err)
	}
	return nil
}

// writeLedger records the accounting event, its parameters and the
// assumptions as.
func (p *Plan) writeLedger(r Request, as []string) error {
	ev, err := p.composition.Event(p.NoiseMultiplier, p.steps)
	if err != nil {
		return accountingError("accounting", err)
	}
	params := map[string]any{
		"mechanism": p.Mechanism, "workload": p.Workload, "sampling": string(p.Sampling), "schema": p.Schema.String(),
		"sensitivity": p.Sensitivity.Value, "sensitivity_method": string(p.Sensitivity.Method), "sensitivity_exact": p.Sensitivity.Exact,
		"noise_multiplier": p.NoiseMultiplier, "clip_norm": r.ClipNorm, "noise_std": p.NoiseStd,
		"steps": p.steps, "expected_batch": r.Batch, "examples": r.Examples, "unit": string(p.Unit),
	}
	p.quantileParams(params)
	if p.Unit == UnitUser {
		delete(params, "examples")
		params["users"], params["examples_per_user_per_step"], params["user_mean"] = r.Examples, p.UserBound.Examples, p.UserBound.Mean
	}
	if p.Ledger, err = accountant.NewLedgerEntry(p.acct, ev, p.Delta, accountant.ZeroOut, params, as...); err != nil {
		return accountingError("ledger", err)
	}
	p.Ledger.Unit = string(p.Unit)
	return nil
}

// build makes the mechanism's strategy for workload w under the schema,
// or returns the one chooseBands built.
func build(ctx context.Context, mech Mechanism, w dpcore.Workload, schema dpcore.Schema, opt mfnoise.BuildOptions, prebuilt *mfnoise.Factorization) (dpcore.Strategy, error) {
	if prebuilt != nil {
		return prebuilt, nil
	}
	s, err := mech.Build(ctx, w, schema, opt)
	if err != nil {
		return nil, fmt.Errorf("privacy: mechanism %s: %w", mech, err)
	}
	return s, nil
}

func newSampler(samp Sampling, m, batch, partitions, n int, seed *dpcore.Seed) (sampler.Sampler, error) {
	opt := sampler.Options{Seed: seed}
	var s sampler.Sampler
	var err error
	switch samp {
	case SamplingPoisson:
		s, err = sampler.NewPoisson(m, float64(batch)/float64(m), n, opt)
	case SamplingBandPoisson:
		s, err = sampler.NewBandPoisson(m, batch, partitions, n, false, opt)
	case SamplingFixedOrder:
		s, err = sampler.NewFixedOrder(m, batch, n, opt)
	case SamplingShuffle:
		s, err = sampler.NewShuffle(m, batch, n, opt)
	case SamplingRandomAllocation:
		s, err = sampler.NewRandomAllocation(m, batch, n, opt)
	case SamplingBandAllocation:
		s, err = sampler.NewBandAllocation(m, batch, partitions, n, opt)
	default:
		return nil, invalidf("sampling %q: want poisson, band-poisson, fixed-order, shuffle, random-allocation or band-allocation", string(samp))
	}
	if err != nil {
		return nil, fmt.Errorf("privacy: sampler: %w", err)
	}
	return s, nil
}

// EpsilonAfter is the epsilon spent after the first t steps. Amplified
// accounting composes the events of those steps; an unamplified matrix
// mechanism is one Gaussian mechanism over the whole run, so its epsilon is
// the planned one from the first step on (a conservative report).
func (p *Plan) EpsilonAfter(t int) (float64, error) {
	if p.acct == nil || t <= 0 {
		return 0, nil
	}
	if !p.Amplified {
		return p.Epsilon, nil
	}
	return p.composition.Epsilon(p.acct, p.NoiseMultiplier, min(t, p.steps), p.Delta)
}

// EpsilonSpent is an upper bound on the epsilon spent after the first t
// steps that costs at most a few dozen accountant calls over a whole run,
// for reporting on every step. Amplified accounting gains one composition
// every b steps (1 for DP-SGD, b for band sampling); the bound is the exact
// epsilon after c' compositions, c' the smallest point at or above the
// compositions done so far on the grid 1, 2, ..., 16 then up by 10% (and
// always the last). So it exceeds the exact value by the growth of epsilon
// over at most 10% more compositions (about 5%: epsilon grows like the
// square root of the compositions), is exact at the grid points and at the
// end, and is never below what was spent. Unamplified accounting is one
// Gaussian mechanism over the run: the planned epsilon from step 1.
func (p *Plan) EpsilonSpent(t int) (float64, error) {
	if p.acct == nil || t <= 0 {
		return 0, nil
	}
	if !p.Amplified {
		return p.Epsilon, nil
	}
	parts := p.composition.stepsPerComposition()
	t = min(t, p.steps)
	c := gridUp(p.composition.Compositions(t), p.composition.Compositions(p.steps))
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.spent[c]; ok {
		return e, nil
	}
	e, err := p.EpsilonAfter(min(c*parts, p.steps))
	if err != nil {
		return 0, err
	}
	if p.spent == nil {
		p.spent = map[int]float64{}
	}
	p.spent[c] = e
	return e, nil
}

// gridUp is the smallest grid point >= c: every count up to 16, then
// counts growing by 10%, and total.
func gridUp(c, total int) int {
	g := 1
	for g < c {
		if g < 16 {
			g++
		} else {
			g = int(math.Ceil(float64(g) * 1.1))
		}
	}
	return min(g, total)
}

// String is a one-paragraph human summary of the plan.
func (p *Plan) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "mechanism %s (%s workload), %s sampling, schema %s\n", p.Mechanism, p.Workload, p.Sampling, p.Schema)
	if p.DefaultSampling != nil {
		fmt.Fprintf(&sb, "sampling: %s\n", p.DefaultSampling)
	}
	fmt.Fprintf(&sb, "sensitivity %.6g (%s, exact=%v), noise multiplier %.6g", p.Sensitivity.Value, p.Sensitivity.Method, p.Sensitivity.Exact, p.NoiseMultiplier)
	if p.Quantile != nil {
		fmt.Fprintf(&sb, " (jointly with the clip-norm count; the gradient's %.6g)", p.GradientNoiseMultiplier)
	}
	fmt.Fprintf(&sb, ", noise std %.6g\n", p.NoiseStd)
	fmt.Fprintf(&sb, "(epsilon %.4g, delta %.3g) per %s under %s adjacency by %s accounting", p.Epsilon, p.Delta, p.Unit, p.Ledger.Adjacency, p.Accountant)
	for _, a := range p.Ledger.Assumptions {
		fmt.Fprintf(&sb, "\n  assumes: %s", a)
	}
	return sb.String()
}
