package train

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"strings"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/sampler"
	"gonum.org/v1/gonum/mat"
)

// Plan is the privacy claim of a run, fixed before the first step: which
// sampler realizes which participation schema, which encoder adds noise with
// which sensitivity, and which accounting event that amounts to. Every
// combination whose guarantee does not hold is refused while building it.
type Plan struct {
	Mechanism       string                    `json:"mechanism"`
	Kind            string                    `json:"mechanism_kind"`
	Bands           int                       `json:"bands,omitempty"`
	Workload        string                    `json:"workload"`
	Sampling        Sampling                  `json:"sampling"`
	Schema          mfnoise.Schema            `json:"schema"`
	Sensitivity     mfnoise.SensitivityResult `json:"sensitivity"`
	Accounting      sampler.Accounting        `json:"accounting"`
	Amplified       bool                      `json:"amplified"`
	NoiseMultiplier float64                   `json:"noise_multiplier"`
	// NoiseStd is sigma * zeta * sens: the standard deviation of the noise
	// added to the clipped gradient sum (before dividing by the batch).
	NoiseStd    float64                   `json:"noise_std"`
	Epsilon     float64                   `json:"epsilon"`
	Delta       float64                   `json:"delta"`
	Accountant  string                    `json:"accountant"`
	Calibrated  bool                      `json:"calibrated"`
	Loss        float64                   `json:"mechanism_loss,omitempty"`
	BandTable   *accountant.BandSelection `json:"band_selection,omitempty"`
	Assumptions []string                  `json:"assumptions"`
	// Ledger is the auditable record: the accounting event, accountant
	// settings, parameters and (epsilon, delta).
	Ledger accountant.LedgerEntry `json:"ledger"`

	factorization *mfnoise.Factorization
	event         func(sigma float64, steps int) (accountant.Event, error)
	acct          accountant.Accountant
}

// Factorization is the mechanism's factorization (nil for DP-SGD's
// identity encoder and for non-private runs).
func (p *Plan) Factorization() *mfnoise.Factorization { return p.factorization }

// EpsilonAfter is the epsilon spent after the first t steps. For amplified
// accounting it composes the events of those steps; an unamplified matrix
// mechanism is one Gaussian mechanism over the whole run, so its epsilon is
// the planned one from the first step on (a conservative report).
func (p *Plan) EpsilonAfter(t int) (float64, error) {
	if p.event == nil {
		return 0, nil
	}
	if !p.Amplified || t <= 0 {
		if t <= 0 {
			return 0, nil
		}
		return p.Epsilon, nil
	}
	ev, err := p.event(p.NoiseMultiplier, t)
	if err != nil {
		return 0, err
	}
	return p.acct.Epsilon(ev, p.Delta)
}

func refusef(format string, args ...any) error {
	return fmt.Errorf("train: %w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// deriveSeed gives each consumer its own 32-byte seed from the run's seed,
// or nil (crypto/rand) when the run has none.
func deriveSeed(master []byte, label string) []byte {
	if master == nil {
		return nil
	}
	h := sha256.New()
	h.Write(master)
	h.Write([]byte{0})
	h.Write([]byte(label))
	return h.Sum(nil)
}

func newAccountant(name string) (accountant.Accountant, error) {
	switch name {
	case "pld", "":
		return accountant.NewPLD(accountant.PLDOptions{}), nil
	case "rdp":
		return accountant.NewRDP(nil), nil
	}
	return nil, fmt.Errorf("train: %w: accountant %q", ErrInvalid, name)
}

// planInput is what building a plan needs beyond the Config.
type planInput struct {
	examples int
	workload mfnoise.Workload // the optimizer's own workload over Steps
}

// buildPlan binds mechanism, sampler and accounting and returns the plan and
// the sampler that realizes it.
func buildPlan(ctx context.Context, cfg *Config, in planInput) (*Plan, sampler.Sampler, error) {
	spec, err := mfnoise.ParseMechanism(cfg.Mechanism)
	if err != nil {
		return nil, nil, fmt.Errorf("train: %w", err)
	}
	n, m, batch := cfg.Steps, in.examples, cfg.Batch
	delta := cfg.Delta
	if delta == 0 {
		delta = math.Min(1e-5, 1/float64(m))
	}
	acct, err := newAccountant(cfg.Accountant)
	if err != nil {
		return nil, nil, err
	}
	p := &Plan{Mechanism: spec.Name, Kind: spec.Kind, Delta: delta, Accountant: acct.Name(), acct: acct}

	w := in.workload
	if cfg.Workload == WorkloadPrefix || spec.Kind == "dpsgd" {
		w, _ = mfnoise.PrefixSum(n)
	}
	p.Workload = w.String()
	var cache *mfnoise.Cache
	if cfg.CacheDir != "" {
		cache = &mfnoise.Cache{Dir: cfg.CacheDir}
	}
	bopt := mfnoise.BuildOptions{Cache: cache}

	samp := cfg.Sampling
	if samp == SamplingAuto {
		switch spec.Kind {
		case "dpsgd":
			samp = SamplingPoisson
		case "bandmf", "toeplitz":
			samp = SamplingBandPoisson
		default:
			samp = SamplingFixedOrder
		}
	}
	p.Sampling = samp

	// Bands: a banded mechanism's band count, and the number of partitions
	// of band sampling; auto picks by banded-MF App. F.4.
	if spec.Kind == "bandmf" && spec.AutoBands {
		if samp != SamplingBandPoisson {
			return nil, nil, refusef("bandmf:auto chooses bands by amplified accounting and needs band-poisson sampling, not %s", samp)
		}
		if cfg.Epsilon <= 0 {
			return nil, nil, refusef("bandmf:auto needs a target epsilon to compare band counts")
		}
		sel, err := chooseBands(ctx, acct, cfg, m, w, bopt)
		if err != nil {
			return nil, nil, err
		}
		p.BandTable = sel
		spec.Bands, spec.AutoBands = sel.Chosen().Bands, false
		if spec.Bands == 1 {
			spec.Kind = "dpsgd"
		}
	}
	if spec.Bands > n {
		return nil, nil, fmt.Errorf("train: %w: %s has %d bands, more than the %d steps", ErrInvalid, spec.Name, spec.Bands, n)
	}
	p.Bands = spec.Bands
	partitions := cfg.Bands
	if partitions == 0 {
		partitions = max(spec.Bands, 1)
	}

	sopt := sampler.Options{Seed: deriveSeed(cfg.Seed, "sampler")}
	var s sampler.Sampler
	switch samp {
	case SamplingPoisson:
		s, err = sampler.NewPoisson(m, float64(batch)/float64(m), n, sopt)
	case SamplingBandPoisson:
		s, err = sampler.NewBandPoisson(m, batch, partitions, n, false, sopt)
	case SamplingFixedOrder:
		s, err = sampler.NewFixedOrder(m, batch, n, sopt)
	case SamplingShuffle:
		s, err = sampler.NewShuffle(m, batch, n, sopt)
	default:
		return nil, nil, fmt.Errorf("train: %w: sampling %q", ErrInvalid, samp)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("train: sampler: %w", err)
	}
	p.Schema = s.Schema()
	p.Accounting = s.Accounting()
	p.Amplified = p.Accounting.Kind == "poisson" || p.Accounting.Kind == "band-poisson"
	p.Assumptions = append(p.Assumptions, p.Accounting.Assumptions...)

	if spec.Kind == "mf-kb" && samp != SamplingFixedOrder {
		return nil, nil, refusef("mf-kb is optimized for (k,b)-participation, which only fixed-order sampling realizes, not %s sampling (%s)", samp, p.Schema)
	}
	if p.Amplified && spec.Kind != "dpsgd" && spec.Kind != "bandmf" && spec.Kind != "toeplitz" {
		return nil, nil, refusef("%s with %s sampling: only banded encoders (dpsgd, bandmf, toeplitz) have amplified accounting — use fixed-order sampling (unamplified)", spec.Name, samp)
	}
	f, err := mfnoise.Build(ctx, spec, w, p.Schema, bopt)
	if err != nil {
		return nil, nil, fmt.Errorf("train: mechanism %s: %w", spec.Name, err)
	}
	p.factorization = f

	bands := bandsOf(f.Encoder)
	if p.Amplified {
		// Amplification by sampling holds for an encoder that is b-banded
		// with b no larger than the sampler's separation (banded-MF Thm 4;
		// DP-SGD is 1-banded), never for a dense or tall encoder.
		if bands == 0 {
			return nil, nil, refusef("%s with %s sampling: only banded encoders (dpsgd, bandmf) have amplified accounting; %s's encoder is not banded — use fixed-order sampling (unamplified)", spec.Name, samp, spec.Name)
		}
		sep := p.Accounting.Bands
		if p.Accounting.Kind == "poisson" {
			sep = 1
		}
		if bands > sep {
			return nil, nil, refusef("%s has %d bands but %s sampling separates participations by only %d steps: amplified accounting needs bands <= %d", spec.Name, bands, samp, sep, sep)
		}
	}
	// Unamplified sensitivity is computed below for the sampler's own
	// schema without relying on banding (bands 0); amplified accounting
	// relies on the band structure.
	checkBands := 0
	if p.Amplified {
		checkBands = bands
	}
	if err := sampler.CheckCompatible(s, p.Schema, checkBands, p.Amplified); err != nil {
		return nil, nil, fmt.Errorf("train: %w: %w", ErrRefused, err)
	}

	if p.Amplified {
		// Each participation sees one column of C: the per-participation
		// sensitivity is the largest column norm.
		sens, err := mfnoise.Sensitivity(f.Encoder, mfnoise.SingleParticipation())
		if err != nil {
			return nil, nil, fmt.Errorf("train: %w", err)
		}
		p.Sensitivity = sens
		q, comp := p.Accounting.Q, p.Accounting.Compositions
		parts := max(p.Accounting.Bands, 1)
		p.event = func(sigma float64, steps int) (accountant.Event, error) {
			if parts == 1 {
				return accountant.DPSGDEvent(sigma, q, steps)
			}
			return accountant.BandMFEvent(sigma, m, batch, parts, steps)
		}
		p.Assumptions = append(p.Assumptions, fmt.Sprintf("amplified accounting: %d compositions of a Poisson-subsampled Gaussian at rate %.6g", comp, q))
	} else {
		sens, err := mfnoise.Sensitivity(f.Encoder, p.Schema)
		if err != nil {
			return nil, nil, refusef("%s: sensitivity under %s cannot be computed: %v", spec.Name, p.Schema, err)
		}
		p.Sensitivity = sens
		p.event = func(sigma float64, _ int) (accountant.Event, error) {
			return accountant.UnamplifiedMFEvent(sigma)
		}
		method := "exact"
		if !sens.Exact {
			method = "an upper bound"
		}
		p.Assumptions = append(p.Assumptions, fmt.Sprintf("unamplified accounting: one Gaussian mechanism with sensitivity %.6g under %s (%s, %s)", sens.Value, p.Schema, sens.Method, method))
	}
	if p.Accounting.Kind == "none" {
		p.Assumptions = append(p.Assumptions, "shuffling: no amplification is claimed; epsilon assumes any order of participation allowed by the schema")
	}
	p.Assumptions = append(p.Assumptions, "adjacency: zero-out (one example's contribution replaced by zero)", "decoder and optimizer are post-processing (Denisov et al. Thm 2.1)")

	if cfg.NoiseMultiplier > 0 {
		p.NoiseMultiplier = cfg.NoiseMultiplier
		ev, err := p.event(p.NoiseMultiplier, n)
		if err != nil {
			return nil, nil, fmt.Errorf("train: accounting: %w", err)
		}
		if p.Epsilon, err = acct.Epsilon(ev, delta); err != nil {
			return nil, nil, fmt.Errorf("train: accounting: %w", err)
		}
	} else {
		cal, err := accountant.Calibrate(acct, func(sigma float64) (accountant.Event, error) { return p.event(sigma, n) }, cfg.Epsilon, delta)
		if err != nil {
			return nil, nil, fmt.Errorf("train: calibrating sigma for epsilon %g: %w", cfg.Epsilon, err)
		}
		p.NoiseMultiplier, p.Epsilon, p.Calibrated = cal.Sigma, cal.Epsilon, true
	}
	p.NoiseStd = p.NoiseMultiplier * cfg.ClipNorm * p.Sensitivity.Value
	fro := mat.Norm(f.Decoder, 2)
	p.Loss = p.Sensitivity.Value * p.Sensitivity.Value * fro * fro
	ev, err := p.event(p.NoiseMultiplier, n)
	if err != nil {
		return nil, nil, fmt.Errorf("train: accounting: %w", err)
	}
	params := map[string]any{
		"mechanism": p.Mechanism, "workload": p.Workload, "sampling": string(p.Sampling), "schema": p.Schema.String(),
		"sensitivity": p.Sensitivity.Value, "sensitivity_method": string(p.Sensitivity.Method), "sensitivity_exact": p.Sensitivity.Exact,
		"noise_multiplier": p.NoiseMultiplier, "clip_norm": cfg.ClipNorm, "noise_std": p.NoiseStd,
		"steps": n, "expected_batch": batch, "examples": m,
	}
	if p.Ledger, err = accountant.NewLedgerEntry(acct, ev, delta, params, p.Assumptions...); err != nil {
		return nil, nil, fmt.Errorf("train: ledger: %w", err)
	}
	return p, s, nil
}

// selectionGap is the optimizer's stopping gap for band-count candidates.
const selectionGap = 1e-2

// chooseBands calibrates sigma for each candidate band count that can
// amplify (b < m/B) and picks the smallest sigma_b^2 * Loss_b.
func chooseBands(ctx context.Context, acct accountant.Accountant, cfg *Config, m int, w mfnoise.Workload, bopt mfnoise.BuildOptions) (*accountant.BandSelection, error) {
	// Candidates are compared by loss, and losses of different band
	// counts differ by factors: a coarse optimization (within about 1% of
	// the optimum) ranks them correctly at a fraction of the cost. The
	// chosen count is then built at full precision; the differing Gap
	// keeps the two apart in the cache.
	coarse := bopt
	coarse.Optimize = &mfnoise.OptimizeSettings{Gap: selectionGap}
	var cands []accountant.BandCandidate
	limit := min(cfg.Steps, m/cfg.Batch-1)
	for b := 1; b <= limit; b *= 2 {
		spec := mfnoise.MechanismSpec{Name: fmt.Sprintf("bandmf:%d", b), Kind: "bandmf", Bands: b, Stamps: 1}
		if b == 1 {
			spec = mfnoise.MechanismSpec{Name: "dpsgd", Kind: "dpsgd", Stamps: 1}
		}
		f, err := mfnoise.Build(ctx, spec, w, mfnoise.SingleParticipation(), coarse)
		if err != nil {
			return nil, fmt.Errorf("train: bandmf:auto: %d bands: %w", b, err)
		}
		sens, _ := mfnoise.Sensitivity(f.Encoder, mfnoise.SingleParticipation())
		fro := mat.Norm(f.Decoder, 2)
		cands = append(cands, accountant.BandCandidate{Bands: b, Loss: sens.Value * sens.Value * fro * fro})
	}
	if len(cands) == 0 {
		return nil, refusef("bandmf:auto: batch %d of %d examples leaves no band count that amplifies", cfg.Batch, m)
	}
	delta := cfg.Delta
	if delta == 0 {
		delta = math.Min(1e-5, 1/float64(m))
	}
	sel, err := accountant.SelectBands(acct, cfg.Epsilon, delta, m, cfg.Batch, cfg.Steps, cands)
	if err != nil {
		return nil, fmt.Errorf("train: bandmf:auto: %w", err)
	}
	return &sel, nil
}

// bandsOf returns the band count of a square lower-triangular encoder (the
// smallest b with C[i,j] = 0 whenever i - j >= b), or 0 if C is tall or not
// lower triangular.
func bandsOf(c *mat.Dense) int {
	r, n := c.Dims()
	if r != n {
		return 0
	}
	b := 1
	for i := 0; i < n; i++ {
		row := c.RawRowView(i)
		for j, v := range row {
			if v == 0 {
				continue
			}
			if j > i {
				return 0
			}
			b = max(b, i-j+1)
		}
	}
	return b
}

// String is a one-paragraph human summary of the plan.
func (p *Plan) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "mechanism %s", p.Mechanism)
	if p.Bands > 0 {
		fmt.Fprintf(&sb, " (%d bands)", p.Bands)
	}
	fmt.Fprintf(&sb, " (%s workload), %s sampling, schema %s\n", p.Workload, p.Sampling, p.Schema)
	fmt.Fprintf(&sb, "sensitivity %.6g (%s, exact=%v), noise multiplier %.6g, noise std %.6g\n", p.Sensitivity.Value, p.Sensitivity.Method, p.Sensitivity.Exact, p.NoiseMultiplier, p.NoiseStd)
	fmt.Fprintf(&sb, "(epsilon %.4g, delta %.3g) by %s accounting", p.Epsilon, p.Delta, p.Accountant)
	for _, a := range p.Assumptions {
		fmt.Fprintf(&sb, "\n  assumes: %s", a)
	}
	return sb.String()
}
