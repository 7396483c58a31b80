package train

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"time"

	"github.com/dpmf-go/dpmf/audit"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
)

// AuditMode names the adversary of an audit.
type AuditMode int

const (
	// AuditWhitebox: gradient canaries, every released noisy update seen
	// (audit.Whitebox). The strongest adversary the guarantee covers.
	AuditWhitebox AuditMode = iota + 1
	// AuditBlackbox: mislabelled input canaries (held-out test examples
	// with a wrong label), only the final model seen, scored by loss.
	AuditBlackbox
)

func (m AuditMode) String() string {
	switch m {
	case AuditWhitebox:
		return "whitebox"
	case AuditBlackbox:
		return "blackbox"
	}
	return fmt.Sprintf("AuditMode(%d)", int(m))
}

// AuditOptions configures Audit.
type AuditOptions struct {
	// Canaries is the number m of canaries (>= 2), each IN with
	// probability 1/2.
	Canaries int
	Mode     AuditMode
	// Confidence of the lower bound; 0 means 0.95.
	Confidence float64
	// Search chooses how thresholds are tried (audit.Bonferroni default).
	Search audit.Search
	// UnsafeNoiseScale, if not 0 or 1, multiplies the noise actually added
	// while the plan still claims the original epsilon. It breaks the
	// privacy guarantee and exists only to check that the audit catches a
	// broken system; Audit is the only way to set it, and the result is
	// marked.
	UnsafeNoiseScale float64
}

// AuditResult is the outcome of Audit.
type AuditResult struct {
	Mechanism string `json:"mechanism"`
	Audit     string `json:"audit"`
	// Epsilon and Delta are the plan's claim.
	Epsilon           float64 `json:"epsilon"`
	Delta             float64 `json:"delta"`
	EpsilonLowerBound float64 `json:"epsilon_lower_bound"`
	Confidence        float64 `json:"confidence"`
	Canaries          int     `json:"canaries"`
	// Unit is the plan's unit of privacy; at user level every canary is
	// a user of k examples (CanaryExamples).
	Unit           string `json:"unit"`
	CanaryExamples int    `json:"canary_examples"`
	// UnsafeNoiseScale is set when the noise was scaled: the claim does
	// not hold for this run.
	UnsafeNoiseScale float64      `json:"unsafe_noise_scale,omitempty"`
	Violated         bool         `json:"claim_violated"`
	Bound            audit.Result `json:"bound"`
	// GDP is the f-DP reading (audit.GDPFromScores), for unamplified plans
	// only: they claim (1/sigma)-GDP, MuClaimed. GDPViolated: the run is
	// shown not to be MuClaimed-GDP at the confidence.
	GDP         *audit.GDPResult `json:"gdp,omitempty"`
	MuClaimed   float64          `json:"mu_claimed,omitempty"`
	GDPViolated bool             `json:"gdp_claim_violated,omitempty"`
	Plan        *Plan            `json:"plan"`
	Final       EvalMetrics      `json:"final"`
	Elapsed     float64          `json:"seconds"`
}

// auditHook is the trainer's side of an audit: it takes canary slots out of
// each batch, adds the white-box canaries' gradients, scales the noise
// under UnsafeNoiseScale and records what the adversary sees. Its methods
// are no-ops on a nil hook, so an ordinary run pays one nil check.
type auditHook struct {
	start   int // dataset indices >= start are white-box canary slots
	wb      *audit.Whitebox
	scale   float64
	sampled []int
	clean   []float32
}

// split removes the canary slots from a batch, remembering them.
func (h *auditHook) split(idx []int) []int {
	if h == nil || h.wb == nil {
		return idx
	}
	h.sampled = h.sampled[:0]
	out := idx[:0]
	for _, i := range idx {
		if i >= h.start {
			h.sampled = append(h.sampled, i-h.start)
		} else {
			out = append(out, i)
		}
	}
	return out
}

// beforeNoise keeps the clean sum and adds the IN canaries' gradients.
func (h *auditHook) beforeNoise(step int, sum []float32) error {
	if h == nil || h.wb == nil {
		return nil
	}
	h.clean = append(h.clean[:0], sum...)
	return h.wb.Add(step, h.sampled, sum)
}

// noiseScale is the factor applied to the noise actually added.
func (h *auditHook) noiseScale() float64 {
	if h == nil || h.scale == 0 {
		return 1
	}
	return h.scale
}

// released records the released noisy sum.
func (h *auditHook) released(step int, sum []float32) error {
	if h == nil || h.wb == nil {
		return nil
	}
	return h.wb.Observe(step, sum, h.clean)
}

// Audit trains once with canaries and measures an empirical lower bound on
// epsilon (package audit). White-box: m canary slots are appended to the
// training set and sampled by the run's own sampler; a sampled IN slot
// contributes clip-norm times a coordinate vector of its own instead of a
// model gradient, and the adversary sees every released noisy sum (minus
// the other examples' clipped gradients, which it may know). Black-box: m
// held-out test examples get a wrong label; the IN ones join the training
// set, and after training each is scored by its loss. Both use the run's
// real plan: sampler, sensitivity, calibration and noise source.
func Audit(ctx context.Context, cfg Config, opt AuditOptions) (*AuditResult, error) {
	start := time.Now()
	cfg.Defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error { return invalidf("audit: "+format, args...) }
	switch {
	case cfg.NonPrivate:
		return nil, bad("a non-private run has no claim to audit")
	case cfg.CheckpointPath != "":
		return nil, bad("an audit is one uninterrupted run: no checkpoint")
	case opt.Canaries < 2:
		return nil, bad("%d canaries, want at least 2", opt.Canaries)
	case opt.Mode != AuditWhitebox && opt.Mode != AuditBlackbox:
		return nil, bad("mode %v: want whitebox or blackbox", opt.Mode)
	case opt.UnsafeNoiseScale < 0 || math.IsNaN(opt.UnsafeNoiseScale) || math.IsInf(opt.UnsafeNoiseScale, 0):
		return nil, bad("unsafe noise scale %v", opt.UnsafeNoiseScale)
	}
	// The canaries' arrays: white-box, an input slot (the training set is
	// copied with them) and one observation per step each; black-box, a
	// held-out example each, and the training set copied.
	per := float64(cfg.Train.Shape.Size())
	need := float64(opt.Canaries)*(4*per+8+16) + float64(cfg.Train.Len())*(4*per+8)
	if opt.Mode == AuditWhitebox {
		need += float64(opt.Canaries) * 8 * float64(cfg.Steps)
	}
	if err := checkMemory(fmt.Sprintf("audit with %d canaries", opt.Canaries), need); err != nil {
		return nil, err
	}
	if opt.Confidence == 0 {
		opt.Confidence = 0.95
	}
	if !(opt.Confidence > 0 && opt.Confidence < 1) {
		return nil, bad("confidence %v, want (0, 1)", opt.Confidence)
	}
	// group is the number of examples of one canary: k at user level
	// (canary users), else 1.
	group := 1
	if cfg.UserLevel {
		group = cfg.UserExamples
	}
	seed := deriveSeed(cfg.Seed, "audit")
	rng, err := auditRand(seed)
	if err != nil {
		return nil, err
	}
	hook := &auditHook{scale: opt.UnsafeNoiseScale}
	var canX []float32
	var canY []int
	var in []bool
	train := cfg.Train
	switch opt.Mode {
	case AuditWhitebox:
		// Slots that are never gathered: any valid example will do. At
		// user level each canary is a user of k slots, sampled as a user;
		// a sampled IN canary user contributes its whole clipped bound.
		slots := opt.Canaries * group
		per := train.Shape.Size()
		x := append(append([]float32(nil), train.X...), make([]float32, slots*per)...)
		y := append(append([]int(nil), train.Y...), make([]int, slots)...)
		if cfg.Train, err = data.NewDataset(x, y, train.Shape, train.Classes); err != nil {
			return nil, fmt.Errorf("train: audit: %w", err)
		}
		hook.start = train.Len()
		if cfg.UserLevel {
			if hook.start, err = addCanaryOwners(cfg.Train, train, opt.Canaries, group, nil); err != nil {
				return nil, err
			}
		}
	case AuditBlackbox:
		if cfg.Test == nil || cfg.Test.Len() < opt.Canaries*group+1 {
			return nil, bad("black-box canaries are held-out test examples: %d canaries of %d examples need a test set of more than %d", opt.Canaries, group, opt.Canaries*group)
		}
		if train.Classes < 2 {
			return nil, bad("mislabelled canaries need at least 2 classes")
		}
		perm := rng.Perm(cfg.Test.Len())
		nc := opt.Canaries * group
		cidx, rest := perm[:nc], perm[nc:]
		per := train.Shape.Size()
		canX, canY = make([]float32, nc*per), make([]int, nc)
		if err := cfg.Test.Batch(cidx, canX, canY); err != nil {
			return nil, fmt.Errorf("train: audit: %w", err)
		}
		in = make([]bool, opt.Canaries)
		x := append([]float32(nil), train.X...)
		y := append([]int(nil), train.Y...)
		for j := range canY {
			canY[j] = (canY[j] + 1 + rng.IntN(train.Classes-1)) % train.Classes // a wrong label
		}
		// Canary j is examples j*group to (j+1)*group-1: one example, or
		// one canary user's examples at user level.
		for j := range in {
			if in[j] = rng.Uint64()&1 == 1; in[j] {
				x = append(x, canX[j*group*per:(j+1)*group*per]...)
				y = append(y, canY[j*group:(j+1)*group]...)
			}
		}
		if cfg.Train, err = data.NewDataset(x, y, train.Shape, train.Classes); err != nil {
			return nil, fmt.Errorf("train: audit: %w", err)
		}
		if cfg.UserLevel {
			if _, err = addCanaryOwners(cfg.Train, train, opt.Canaries, group, in); err != nil {
				return nil, err
			}
		}
		if cfg.Test, err = cfg.Test.Subset(rest); err != nil {
			return nil, fmt.Errorf("train: audit: %w", err)
		}
	}
	t, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	p := t.plan
	if opt.Mode == AuditWhitebox {
		// The white-box audit weighs the noise by its n x n precision
		// matrix: a Toeplitz mechanism's dense factorization is built for
		// it (refused above dpcore.DenseStepLimit steps).
		f, err := p.Factorization()
		if err != nil {
			return nil, fmt.Errorf("train: audit: %w", err)
		}
		part := audit.Participation{Amplified: p.Amplified}
		if p.Amplified {
			part.Q, part.Partitions = p.Accounting.Q, max(p.Accounting.Bands, 1)
		}
		hook.wb, err = audit.NewWhitebox(audit.WhiteboxConfig{
			Canaries: opt.Canaries, Dim: len(t.engine.Params()), Steps: cfg.Steps,
			ClipNorm: cfg.ClipNorm, NoiseStd: p.NoiseStd, Factorization: f,
			Participation: part, Seed: seed,
		})
		if err != nil {
			return nil, invalidf("%w", err)
		}
	}
	t.audit = hook
	if cfg.Log != nil {
		fmt.Fprintln(cfg.Log, p)
		if s := hook.noiseScale(); s != 1 {
			fmt.Fprintf(cfg.Log, "WARNING: -unsafe-noise-scale %g: the noise added is %g times the planned noise; the claim (epsilon %.4g) does NOT hold for this run\n", s, s, p.Epsilon)
		}
	}
	for !t.Done() {
		if _, err := t.TrainStep(ctx); err != nil {
			return nil, err
		}
	}
	res := &AuditResult{
		Mechanism: p.Mechanism, Audit: opt.Mode.String(), Epsilon: p.Epsilon, Delta: p.Delta,
		Confidence: opt.Confidence, Canaries: opt.Canaries, Plan: p,
		Unit: string(p.Unit), CanaryExamples: group,
	}
	if s := hook.noiseScale(); s != 1 {
		res.UnsafeNoiseScale = s
	}
	if res.Final, err = t.Evaluate(); err != nil {
		return nil, err
	}
	var scores []float64
	switch opt.Mode {
	case AuditWhitebox:
		if scores, err = hook.wb.Scores(); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		in = hook.wb.Membership()
	case AuditBlackbox:
		scores = make([]float64, opt.Canaries)
		per := train.Shape.Size()
		for j := range scores {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			loss, _, err := t.engine.EvaluateContext(ctx, canX[j*group*per:(j+1)*group*per], canY[j*group:(j+1)*group])
			if err != nil {
				return nil, fmt.Errorf("train: audit: scoring canary %d: %w", j, err)
			}
			scores[j] = -loss
		}
	}
	if res.Bound, err = audit.FromScores(scores, in, p.Delta, opt.Confidence, opt.Search); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	if !p.Amplified {
		// An unamplified plan claims one Gaussian mechanism with noise
		// multiplier sigma: (1/sigma)-GDP, which the f-DP reading tests
		// directly.
		gdp, err := audit.GDPFromScores(scores, in, p.Delta, opt.Confidence, opt.Search)
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		res.GDP, res.MuClaimed = &gdp, 1/p.NoiseMultiplier
		res.GDPViolated = gdp.MuLowerBound > res.MuClaimed
	}
	res.EpsilonLowerBound = res.Bound.EpsilonLowerBound
	res.Violated = res.EpsilonLowerBound > res.Epsilon
	res.Elapsed = time.Since(start).Seconds()
	return res, nil
}

// auditRand is a generator for canary choices: from the run's seed, or
// crypto/rand.
func auditRand(seed *dpcore.Seed) (*mrand.Rand, error) {
	var s [32]byte
	if seed != nil {
		s = *seed
	} else if _, err := rand.Read(s[:]); err != nil {
		return nil, fmt.Errorf("train: audit: seeding: %w", err)
	}
	s[0] ^= 0x5a // not the white-box stream, which derives its own
	return mrand.New(mrand.NewChaCha8(s)), nil
}

// addCanaryOwners gives ds (train's examples, then the canaries' examples,
// group each: all canaries, or only those marked in when in is not nil)
// train's owners followed by one new owner id per canary, and returns the
// number of train's users: the canary users are numbered from there.
func addCanaryOwners(ds, train *data.Dataset, canaries, group int, in []bool) (int, error) {
	us, err := train.Users()
	if err != nil {
		return 0, invalidf("audit: %v", err)
	}
	next := int64(math.MinInt64)
	for _, o := range train.Owners {
		next = max(next, o)
	}
	owners := append(make([]int64, 0, ds.Len()), train.Owners...)
	for j := range canaries {
		if in != nil && !in[j] {
			continue
		}
		next++
		for range group {
			owners = append(owners, next)
		}
	}
	if err := ds.SetOwners(owners); err != nil {
		return 0, fmt.Errorf("train: audit: %w", err)
	}
	return us.Len(), nil
}
