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
	"github.com/dpmf-go/dpmf/privacy"
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
	UnsafeNoiseScale float64 `json:"unsafe_noise_scale,omitempty"`
	// Violated is the audit's one flag (audit.Check): at Confidence, the
	// run does not satisfy its claim. Bound is the epsilon reading.
	Violated bool         `json:"claim_violated"`
	Bound    audit.Result `json:"bound"`
	// GDP is the f-DP reading (audit.GDPFromScores), for unamplified plans
	// only: they claim (1/sigma)-GDP, MuClaimed. With it, each reading is
	// made at half the error probability (Bound.Confidence and
	// GDP.Confidence), so that Violated holds at Confidence. GDPViolated
	// says the GDP reading is what found the violation.
	GDP         *audit.GDPResult `json:"gdp,omitempty"`
	MuClaimed   float64          `json:"mu_claimed,omitempty"`
	GDPViolated bool             `json:"gdp_claim_violated,omitempty"`
	Plan        *privacy.Plan    `json:"plan"`
	Final       EvalMetrics      `json:"final"`
	Elapsed     float64          `json:"seconds"`
}

// auditHook is the trainer's side of an audit: it takes canary slots out of
// each batch, adds the white-box canaries' gradients, scales the noise
// under UnsafeNoiseScale and records what the adversary sees. Its methods
// are no-ops on a nil hook, so an ordinary run pays one nil check.
type auditHook struct {
	noStepHook
	// start: the sampler's indices (examples, or users at user level)
	// from start on are the canaries, canary j at start+j.
	start int
	wb    *audit.Whitebox
	// out marks the black-box canaries that are OUT: zero-out canaries,
	// in the data set (so m, q and delta do not depend on the draw) but
	// dropped from every batch that samples them, contributing zero.
	out     []bool
	scale   float64
	sampled []int
	clean   []float32
}

// batch removes the canary slots from a batch: white-box, all of them,
// remembering which were sampled; black-box, the OUT canaries (an IN one
// trains as the example it is).
func (h *auditHook) batch(idx []int) []int {
	if h.wb == nil && h.out == nil {
		return idx
	}
	h.sampled = h.sampled[:0]
	out := idx[:0]
	for _, i := range idx {
		switch {
		case i < h.start:
			out = append(out, i)
		case h.wb != nil:
			h.sampled = append(h.sampled, i-h.start)
		case !h.out[i-h.start]:
			out = append(out, i)
		}
	}
	return out
}

// beforeNoise keeps the clean sum and adds the IN canaries' gradients.
func (h *auditHook) beforeNoise(step int, sum []float32) error {
	if h.wb == nil {
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

// afterNoise records the released noisy sum.
func (h *auditHook) afterNoise(step int, sum []float32) error {
	if h.wb == nil {
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
// held-out test examples get a wrong label and are all appended to the
// training set; an OUT canary is a zero-out canary, dropped from every
// batch that samples it (it contributes zero, the adjacency the claim is
// for), so the number of examples, the sampling rate and delta are those
// of every membership draw; after training each is scored by its loss.
// Both use the run's real plan: sampler, sensitivity, calibration and
// noise source, and report one flag at the stated confidence
// (audit.Check).
//
// The steps: check the options, place the canaries (placeWhitebox,
// placeBlackbox), build the run and attach the white-box observer, train,
// score the canaries and bound epsilon from the scores.
func Audit(ctx context.Context, cfg Config, opt AuditOptions) (*AuditResult, error) {
	start := time.Now()
	cfg.Defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := checkAudit(&cfg, &opt); err != nil {
		return nil, err
	}
	// group is the number of examples of one canary: k at user level
	// (canary users), else 1.
	can := &canaries{group: 1, train: cfg.Data.Train}
	if b := cfg.Privacy.UserBound; b != nil {
		can.group = b.Examples
	}
	seed := dpcore.DeriveSeed(cfg.Privacy.Seed, "audit")
	rng, err := auditRand(seed)
	if err != nil {
		return nil, err
	}
	hook := &auditHook{scale: opt.UnsafeNoiseScale}
	switch opt.Mode {
	case AuditWhitebox:
		err = can.placeWhitebox(&cfg, opt, hook)
	case AuditBlackbox:
		err = can.placeBlackbox(&cfg, opt, rng, hook)
	}
	if err != nil {
		return nil, err
	}
	t, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	p := t.plan
	if opt.Mode == AuditWhitebox {
		if hook.wb, err = newWhitebox(t, opt, seed); err != nil {
			return nil, err
		}
	}
	t.attach(hook)
	if cfg.Output.Log != nil {
		fmt.Fprintln(cfg.Output.Log, p)
		if s := hook.noiseScale(); s != 1 {
			fmt.Fprintf(cfg.Output.Log, "WARNING: -unsafe-noise-scale %g: the noise added is %g times the planned noise; the claim (epsilon %.4g) does NOT hold for this run\n", s, s, p.Epsilon)
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
		Unit: string(p.Unit), CanaryExamples: can.group,
	}
	if s := hook.noiseScale(); s != 1 {
		res.UnsafeNoiseScale = s
	}
	if res.Final, err = t.Evaluate(); err != nil {
		return nil, err
	}
	scores, in, err := can.scores(ctx, t, opt, hook)
	if err != nil {
		return nil, err
	}
	if err := res.bound(scores, in, opt); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start).Seconds()
	return res, nil
}

// checkAudit refuses options and runs an audit cannot make, and sets the
// default confidence.
func checkAudit(cfg *Config, opt *AuditOptions) error {
	bad := func(format string, args ...any) error { return invalidf("audit: "+format, args...) }
	switch {
	case cfg.NonPrivate:
		return bad("a non-private run has no claim to audit")
	case cfg.Output.CheckpointPath != "":
		return bad("an audit is one uninterrupted run: no checkpoint")
	case opt.Canaries < 2:
		return bad("%d canaries, want at least 2", opt.Canaries)
	case opt.Mode != AuditWhitebox && opt.Mode != AuditBlackbox:
		return bad("mode %v: want whitebox or blackbox", opt.Mode)
	case opt.UnsafeNoiseScale < 0 || math.IsNaN(opt.UnsafeNoiseScale) || math.IsInf(opt.UnsafeNoiseScale, 0):
		return bad("unsafe noise scale %v", opt.UnsafeNoiseScale)
	}
	// The canaries' arrays: white-box, an input slot (the training set is
	// copied with them) and one observation per step each; black-box, a
	// held-out example each, and the training set copied.
	per := float64(cfg.Data.Train.Shape.Size())
	need := float64(opt.Canaries)*(4*per+8+16) + float64(cfg.Data.Train.Len())*(4*per+8)
	if opt.Mode == AuditWhitebox {
		need += float64(opt.Canaries) * 8 * float64(cfg.Privacy.Steps)
	}
	if err := checkMemory(fmt.Sprintf("audit with %d canaries", opt.Canaries), need); err != nil {
		return err
	}
	if opt.Confidence == 0 {
		opt.Confidence = 0.95
	}
	if !(opt.Confidence > 0 && opt.Confidence < 1) {
		return bad("confidence %v, want (0, 1)", opt.Confidence)
	}
	return nil
}

// canaries are an audit's canaries: group examples each; black-box, their
// examples (canX, canY) and which joined the training set (in). train is
// the training set without them.
type canaries struct {
	group int
	train *data.Dataset
	canX  []float32
	canY  []int
	in    []bool
}

// placeWhitebox appends the canaries' slots to cfg.Train. Slots that are
// never gathered: any valid example will do. At user level each canary is
// a user of group slots, sampled as a user; a sampled IN canary user
// contributes its whole clipped bound.
func (c *canaries) placeWhitebox(cfg *Config, opt AuditOptions, hook *auditHook) error {
	train := c.train
	slots := opt.Canaries * c.group
	per := train.Shape.Size()
	x := append(append([]float32(nil), train.X...), make([]float32, slots*per)...)
	y := append(append([]int(nil), train.Y...), make([]int, slots)...)
	var err error
	if cfg.Data.Train, err = data.NewDataset(x, y, train.Shape, train.Classes); err != nil {
		return fmt.Errorf("train: audit: %w", err)
	}
	hook.start = train.Len()
	if cfg.Privacy.UserBound != nil {
		if hook.start, err = addCanaryOwners(cfg.Data.Train, train, opt.Canaries, c.group); err != nil {
			return err
		}
	}
	return nil
}

// placeBlackbox draws the canaries from cfg.Test (which keeps the rest),
// gives each a wrong label, appends all of them to cfg.Train and marks the
// OUT ones in hook, which drops them from every batch (zero-out). Canary j
// is examples j*group to (j+1)*group-1: one example, or one canary user's
// examples at user level.
func (c *canaries) placeBlackbox(cfg *Config, opt AuditOptions, rng *mrand.Rand, hook *auditHook) error {
	train, group := c.train, c.group
	if cfg.Data.Test == nil || cfg.Data.Test.Len() < opt.Canaries*group+1 {
		return invalidf("audit: black-box canaries are held-out test examples: %d canaries of %d examples need a test set of more than %d", opt.Canaries, group, opt.Canaries*group)
	}
	if train.Classes < 2 {
		return invalidf("audit: mislabelled canaries need at least 2 classes")
	}
	perm := rng.Perm(cfg.Data.Test.Len())
	nc := opt.Canaries * group
	cidx, rest := perm[:nc], perm[nc:]
	per := train.Shape.Size()
	c.canX, c.canY = make([]float32, nc*per), make([]int, nc)
	if err := cfg.Data.Test.Batch(cidx, c.canX, c.canY); err != nil {
		return fmt.Errorf("train: audit: %w", err)
	}
	c.in = make([]bool, opt.Canaries)
	x := append([]float32(nil), train.X...)
	y := append([]int(nil), train.Y...)
	for j := range c.canY {
		c.canY[j] = (c.canY[j] + 1 + rng.IntN(train.Classes-1)) % train.Classes // a wrong label
	}
	hook.out = make([]bool, opt.Canaries)
	for j := range c.in {
		c.in[j] = rng.Uint64()&1 == 1
		hook.out[j] = !c.in[j]
	}
	x = append(x, c.canX...)
	y = append(y, c.canY...)
	var err error
	if cfg.Data.Train, err = data.NewDataset(x, y, train.Shape, train.Classes); err != nil {
		return fmt.Errorf("train: audit: %w", err)
	}
	hook.start = train.Len()
	if cfg.Privacy.UserBound != nil {
		if hook.start, err = addCanaryOwners(cfg.Data.Train, train, opt.Canaries, group); err != nil {
			return err
		}
	}
	if cfg.Data.Test, err = cfg.Data.Test.Subset(rest); err != nil {
		return fmt.Errorf("train: audit: %w", err)
	}
	return nil
}

// newWhitebox is the white-box observer of t's run. It weighs the noise by
// its n x n precision matrix: a Toeplitz mechanism's dense factorization
// is built for it (refused above dpcore.DenseStepLimit steps).
func newWhitebox(t *Trainer, opt AuditOptions, seed *dpcore.Seed) (*audit.Whitebox, error) {
	p := t.plan
	f, err := p.Factorization()
	if err != nil {
		return nil, fmt.Errorf("train: audit: %w", err)
	}
	part := audit.Participation{Amplified: p.Amplified}
	if p.Amplified {
		part.Q, part.Partitions = p.Accounting.Q, max(p.Accounting.Bands, 1)
	}
	wb, err := audit.NewWhitebox(audit.WhiteboxConfig{
		Canaries: opt.Canaries, Dim: len(t.engine.Params()), Steps: t.cfg.Privacy.Steps,
		ClipNorm: t.cfg.Privacy.ClipNorm, NoiseStd: p.NoiseStd, Factorization: f,
		Participation: part, Seed: seed,
	})
	if err != nil {
		return nil, invalidf("%w", err)
	}
	return wb, nil
}

// scores are the canaries' scores after training, and which were IN:
// white-box, the observer's; black-box, minus each canary's loss.
func (c *canaries) scores(ctx context.Context, t *Trainer, opt AuditOptions, hook *auditHook) ([]float64, []bool, error) {
	if opt.Mode == AuditWhitebox {
		scores, err := hook.wb.Scores()
		if err != nil {
			return nil, nil, fmt.Errorf("train: %w", err)
		}
		return scores, hook.wb.Membership(), nil
	}
	scores := make([]float64, opt.Canaries)
	per, group := c.train.Shape.Size(), c.group
	for j := range scores {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		loss, _, err := t.engine.EvaluateContext(ctx, c.canX[j*group*per:(j+1)*group*per], c.canY[j*group:(j+1)*group])
		if err != nil {
			return nil, nil, fmt.Errorf("train: audit: scoring canary %d: %w", j, err)
		}
		scores[j] = -loss
	}
	return scores, c.in, nil
}

// bound fills res's lower bounds and its one flag from the canaries'
// scores (audit.Check): epsilon at the plan's delta, and for an
// unamplified plan, which claims one Gaussian mechanism with noise
// multiplier sigma, also (1/sigma)-GDP, which the f-DP reading tests
// directly; with two readings each is made at half the error probability,
// so that Violated holds at the stated confidence.
func (res *AuditResult) bound(scores []float64, in []bool, opt AuditOptions) error {
	p := res.Plan
	claim := audit.Claim{Epsilon: p.Epsilon, Delta: p.Delta}
	if !p.Amplified {
		claim.Mu = 1 / p.NoiseMultiplier
	}
	v, err := audit.Check(scores, in, claim, opt.Confidence, opt.Search)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	res.Bound, res.GDP, res.MuClaimed = v.Bound, v.GDP, claim.Mu
	res.EpsilonLowerBound = v.Bound.EpsilonLowerBound
	res.Violated, res.GDPViolated = v.Violated, v.GDPViolated
	return nil
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

// addCanaryOwners gives ds (train's examples, then every canary's
// examples, group each) train's owners followed by one new owner id per
// canary, and returns the number of train's users: the canary users are
// numbered from there.
func addCanaryOwners(ds, train *data.Dataset, canaries, group int) (int, error) {
	us, err := train.Users()
	if err != nil {
		return 0, invalidf("audit: %v", err)
	}
	next := int64(math.MinInt64)
	for _, o := range train.Owners {
		next = max(next, o)
	}
	owners := append(make([]int64, 0, ds.Len()), train.Owners...)
	for range canaries {
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
