package aggregate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/privacy"
	bolt "go.etcd.io/bbolt"
)

// Aggregator is a durable private continual-release vector sum. Add is safe
// for concurrent use; Add and Commit are serialized by one writer goroutine
// that makes each batch of contributions durable in one transaction (group
// commit) before acknowledging any of them.
//
// After a storage failure the aggregator stops (every call returns an error
// wrapping ErrClosed); reopening the store continues from the last durable
// state.
type Aggregator struct {
	cfg      Config
	plan     *privacy.ReleasePlan
	dim      int // D: Dim, plus the count coordinate
	n        int // horizon
	noiseStd float64
	norm     float64 // L2 bound of one record
	db       *bolt.DB
	maxBatch int

	// calibrationV1: the store's exact noise was calibrated before issue
	// 43 (arithmeticExactV1), and keeps that multiplier.
	calibrationV1 bool

	ops     chan *op
	closing chan struct{}
	done    chan struct{}
	once    sync.Once

	mu   sync.RWMutex // guards snap
	snap snapshot

	stopWarm context.CancelFunc

	// Owned by the writer goroutine.
	noise        noise.Source // float path only
	noiseBuf     []float32
	exact        *exactPath // nil on the float path
	released     int
	open         openRecord
	state        []float64
	cnt          counters
	contributors map[string][]int
	failed       error
	batches      atomic.Int64 // durable contribution batches (for benchmarks)
}

type snapshot struct {
	released int
	cnt      counters
}

type opKind int

const (
	opAdd opKind = iota
	opCommit
)

type op struct {
	kind        opKind
	contributor string
	vec         []float64 // length D, clipped
	veci        []int64   // exact path: vec on the grid
	clipped     bool
	reject      *RejectError // set when Add already refused it
	done        chan opResult
}

type opResult struct {
	step int
	rel  *Release
	err  error
}

// Open opens (creating if needed) the store at path and returns the
// aggregator, continuing from the store's durable state. A store created
// with a different configuration is refused (ErrStoreMismatch), and so is
// a mechanism whose encoder differs from the one the stored noise state
// was made with (an optimized mechanism must rebuild identically).
//
// The privacy rules are the planner's (privacy.PlanRelease): Open asks it
// for the noise multiplier and the sensitivity, the aggregator enforces
// its participation (ReleasePlan.Admit), and the ledger states its claim.
func Open(ctx context.Context, path string, cfg Config) (*Aggregator, error) {
	return openCalibrated(ctx, path, cfg, false)
}

// openCalibrated is Open, with the multiplier of before issue 43 for a new
// store if calibrationV1 (tests of stores made then).
func openCalibrated(ctx context.Context, path string, cfg Config, calibrationV1 bool) (*Aggregator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("aggregate: open: %w", err)
	}
	a := newAggregator(cfg)
	a.calibrationV1 = calibrationV1
	if err := a.calibrate(); err != nil {
		return nil, err
	}
	var err error
	if a.db, err = openBolt(path, &bolt.Options{Timeout: 2 * time.Second, FreelistType: bolt.FreelistMapType}); err != nil {
		return nil, err
	}
	a.db.NoSync = cfg.NoSync
	if err := a.loadGuarded(path); err != nil {
		a.db.Close()
		return nil, err
	}
	a.snap = snapshot{released: a.released, cnt: a.cnt}
	if a.exact != nil {
		a.exact.drawAhead(a.released + 1)
	}
	// The ledger's prefix sensitivities cost up to a Gram matrix each:
	// compute them in the background, off the path of Add and Commit.
	var warm context.Context
	warm, a.stopWarm = context.WithCancel(context.Background())
	go a.warmLedger(warm)
	go a.writer()
	return a, nil
}

// CheckConfig refuses cfg as Open would, without a store: an invalid
// field, a release the planner refuses, or scales of the arithmetic that
// are not finite (dpcore.ErrInvalid, *privacy.Refusal).
func CheckConfig(cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	return newAggregator(cfg).calibrate()
}

// newAggregator is the aggregator of cfg before its plan and store.
func newAggregator(cfg Config) *Aggregator {
	a := &Aggregator{
		cfg:          cfg,
		dim:          cfg.Dim,
		n:            cfg.Mechanism.Strategy().Steps(),
		norm:         cfg.Clip,
		maxBatch:     cfg.MaxBatch,
		ops:          make(chan *op),
		closing:      make(chan struct{}),
		done:         make(chan struct{}),
		contributors: map[string][]int{},
	}
	if cfg.Count {
		a.dim++
		a.norm *= math.Sqrt2
	}
	if a.maxBatch == 0 {
		a.maxBatch = 4096
	}
	if a.cfg.NoiseMemory == 0 {
		a.cfg.NoiseMemory = DefaultNoiseMemory
	}
	a.state = make([]float64, a.dim)
	return a
}

// calibrate asks the planner for the release's noise and sets up the noise
// source: the exact path's lattice first (the planner accounts for its
// rounding), or the float path's Gaussian noise (tests only).
func (a *Aggregator) calibrate() error {
	cfg := a.cfg
	req := privacy.ReleaseRequest{
		Mechanism: cfg.Mechanism.Name(), Strategy: cfg.Mechanism.Strategy(), Participation: cfg.participation(),
		Epsilon: cfg.Epsilon, Delta: cfg.Delta, Seeded: cfg.Seed != nil, CalibrationV1: a.calibrationV1,
	}
	var err error
	if !cfg.floatNoise {
		if a.exact, err = newExactPath(a.cfg, a.dim, a.norm); err != nil {
			return err
		}
		req.Lattice = a.exact.lattice()
	}
	if a.plan, err = privacy.PlanRelease(req); err != nil {
		return err
	}
	if a.exact != nil {
		if err := a.exact.calibrate(a.plan, cfg.Seed, cfg.wrapRows); err != nil {
			return err
		}
		a.noiseStd = a.exact.noiseStd()
		return nil
	}
	a.noiseStd = a.plan.NoiseMultiplier * a.norm * a.plan.Sensitivity.Value
	if !(a.noiseStd > 0) || math.IsInf(a.noiseStd, 0) {
		return invalidf("noise scale %g (clip norm %g): want a positive finite scale", a.noiseStd, a.cfg.Clip)
	}
	if a.noise, err = a.plan.NoiseSource(a.dim, noise.Options{Seed: cfg.Seed, MemoryBudget: a.cfg.NoiseMemory, Workers: noiseWorkers}); err != nil {
		return fmt.Errorf("aggregate: noise source: %w", err)
	}
	a.noiseBuf = make([]float32, a.dim)
	return nil
}

// Plan is the privacy plan the aggregator releases under.
func (a *Aggregator) Plan() *privacy.ReleasePlan { return a.plan }

// fingerprint is what the store remembers of the configuration.
func (a *Aggregator) fingerprint() []byte {
	fp := map[string]any{
		"format": 1, "dim": a.cfg.Dim, "horizon": a.n, "workload": a.cfg.Workload.String(),
		"mechanism": a.cfg.Mechanism.Name(), "schema": a.cfg.Mechanism.Schema().String(),
		"epsilon": a.cfg.Epsilon, "delta": a.cfg.Delta, "clip": a.cfg.Clip, "k": a.cfg.K, "b": a.cfg.B,
		"count": a.cfg.Count, "seeded": a.cfg.Seed != nil, "noise_memory": a.cfg.NoiseMemory,
	}
	if a.exact != nil {
		fp["arithmetic"] = arithmeticExact
		if a.calibrationV1 {
			fp["arithmetic"] = arithmeticExactV1
		}
	}
	if a.cfg.Seed != nil {
		h := sha256.Sum256(a.cfg.Seed[:])
		fp["seed_sha256"] = hex.EncodeToString(h[:])
	}
	b, _ := json.Marshal(fp) // map keys are sorted: the encoding is canonical
	return b
}

// load creates the store's buckets and initial state if it is new, then
// restores the aggregator from it.
func (a *Aggregator) load() error {
	if err := a.keepCalibrationV1(); err != nil {
		return err
	}
	fp := a.fingerprint()
	if err := a.db.Update(func(tx *bolt.Tx) error { return a.initStore(tx, fp) }); err != nil {
		return fmt.Errorf("aggregate: initializing store: %w", err)
	}
	return a.db.View(func(tx *bolt.Tx) error { return a.restore(tx, fp) })
}

// keepCalibrationV1 recalibrates with the noise multiplier of before
// issue 43 when the store is an exact one made then (its fingerprint is
// this configuration's with arithmeticExactV1), so that it reopens with
// the noise it drew.
func (a *Aggregator) keepCalibrationV1() error {
	if a.exact == nil {
		return nil
	}
	var stored []byte
	if err := a.db.View(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil && meta.Get(keyConfig) != nil {
			var err error
			stored, err = unseal("config", meta.Get(keyConfig))
			return err
		}
		return nil
	}); err != nil || stored == nil {
		return err
	}
	a.calibrationV1 = true
	if string(stored) != string(a.fingerprint()) {
		a.calibrationV1 = false
		return nil
	}
	return a.calibrate()
}

// initStore creates the buckets and, in a new store, writes the
// fingerprint fp, the mechanism, the noise state and the empty first step.
func (a *Aggregator) initStore(tx *bolt.Tx, fp []byte) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	for _, b := range [][]byte{bucketContributors, bucketReleases, bucketSteps, bucketEncoded} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	if meta.Get(keyConfig) != nil {
		return nil
	}
	st, err := a.noiseState()
	if err != nil {
		return err
	}
	a.open = newOpen(0, a.dim, a.exact != nil)
	mb, err := privacy.EncodeStrategy(a.cfg.Mechanism.Strategy())
	if err != nil {
		return err
	}
	if err := meta.Put(keyMech, seal(mb)); err != nil {
		return err
	}
	if err := meta.Put(keyMechName, seal([]byte(a.cfg.Mechanism.Name()))); err != nil {
		return err
	}
	for _, kv := range []struct{ k, v []byte }{
		{keyConfig, seal(fp)}, {keyNoise, seal(st)}, {keyOpen, a.open.encode()},
		{keyState, encodeVec(a.state)}, {keyCounters, counters{}.encode()},
	} {
		if err := meta.Put(kv.k, kv.v); err != nil {
			return err
		}
	}
	return nil
}

// restore reads the aggregator's state from the store, refusing a store
// made with another configuration than fingerprint fp.
func (a *Aggregator) restore(tx *bolt.Tx, fp []byte) error {
	meta := tx.Bucket(bucketMeta)
	stored, err := unseal("config", meta.Get(keyConfig))
	if err != nil {
		return err
	}
	if string(stored) != string(fp) {
		return fmt.Errorf("aggregate: %w: %s", ErrStoreMismatch, fingerprintDiff(stored, fp))
	}
	st, err := unseal("noise state", meta.Get(keyNoise))
	if err != nil {
		return err
	}
	if a.exact != nil {
		err = a.exact.noise.UnmarshalBinary(st)
	} else {
		err = a.noise.UnmarshalBinary(st)
	}
	if err != nil {
		return fmt.Errorf("aggregate: restoring noise state: %w", err)
	}
	if a.open, err = decodeOpen(meta.Get(keyOpen), a.dim, a.exact != nil); err != nil {
		return err
	}
	if err := decodeVec("workload state", meta.Get(keyState), a.state); err != nil {
		return err
	}
	if a.cnt, err = decodeCounters(meta.Get(keyCounters)); err != nil {
		return err
	}
	a.released = a.open.released
	if a.exact != nil {
		if err := a.exact.load(tx, a.released); err != nil {
			return err
		}
	} else if a.noise.Step() != a.released {
		return fmt.Errorf("aggregate: %w: noise state at step %d but %d releases made", errCorrupt, a.noise.Step(), a.released)
	}
	return tx.Bucket(bucketContributors).ForEach(func(k, v []byte) error {
		s, err := decodeSteps(v)
		if err != nil {
			return err
		}
		a.contributors[string(k)] = s
		return nil
	})
}

// Dim is the dimension of a contribution.
func (a *Aggregator) Dim() int { return a.cfg.Dim }

// Horizon is the number of releases the budget covers.
func (a *Aggregator) Horizon() int { return a.n }

// MaxContributorLen is the longest contributor id accepted, in bytes.
const MaxContributorLen = 256

// Add clips vec to L2 norm Clip, checks the contributor's participation
// rules, and adds it to the open step. It returns that step (1-based) once
// the contribution is durable, or a *RejectError. vec is not retained.
//
// If ctx ends while Add waits, Add returns the context's error and the
// contribution may or may not have been accepted.
func (a *Aggregator) Add(ctx context.Context, contributor string, vec []float64) (int, error) {
	o := &op{kind: opAdd, contributor: contributor, done: make(chan opResult, 1)}
	o.vec, o.clipped, o.reject = a.prepare(contributor, vec)
	if a.exact != nil && o.reject == nil {
		o.veci = a.exact.quantize(o.vec)
	}
	r, err := a.submit(ctx, o)
	if err != nil {
		return 0, err
	}
	return r.step, r.err
}

// CheckContribution refuses a contribution that Add of an aggregator of
// dimension dim rejects whatever its state: an empty or too long
// contributor id (ErrContributor), a vector of another length
// (ErrDimension) or one holding a NaN or an infinity (ErrNotFinite). It
// returns nil or a *RejectError. It is the rule Add applies first, and
// the one a front-end applies before it forwards a contribution (package
// replica).
func CheckContribution(contributor string, vec []float64, dim int) error {
	if rej := checkContribution(contributor, vec, dim); rej != nil {
		return rej
	}
	return nil
}

func checkContribution(contributor string, vec []float64, dim int) *RejectError {
	rej := func(reason error, format string, args ...any) *RejectError {
		return &RejectError{Contributor: contributor, Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	if contributor == "" || len(contributor) > MaxContributorLen {
		return rej(ErrContributor, "id has %d bytes, want 1..%d", len(contributor), MaxContributorLen)
	}
	if len(vec) != dim {
		return rej(ErrDimension, "vector has %d values, want %d", len(vec), dim)
	}
	for i, v := range vec {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return rej(ErrNotFinite, "value %d is %v", i, v)
		}
	}
	return nil
}

// prepare validates and clips a contribution into a record of length D.
func (a *Aggregator) prepare(contributor string, vec []float64) ([]float64, bool, *RejectError) {
	if rej := checkContribution(contributor, vec, a.cfg.Dim); rej != nil {
		return nil, false, rej
	}
	ss := 0.0
	for _, v := range vec {
		ss += v * v
	}
	rec := make([]float64, a.dim)
	copy(rec, vec)
	norm := math.Sqrt(ss)
	clipped := false
	if math.IsInf(ss, 0) {
		// Overflow of the sum of squares: rescale before measuring.
		m := 0.0
		for _, v := range vec {
			m = math.Max(m, math.Abs(v))
		}
		ss = 0
		for _, v := range vec {
			ss += (v / m) * (v / m)
		}
		norm = m * math.Sqrt(ss)
	}
	if norm > a.cfg.Clip {
		clipped = true
		s := a.cfg.Clip / norm
		for i := range vec {
			rec[i] = vec[i] * s
		}
		// Rounding can leave the norm a hair above Clip; shrink until not.
		for norm2(rec[:a.cfg.Dim]) > a.cfg.Clip {
			for i := range a.cfg.Dim {
				rec[i] *= 1 - 1e-12
			}
		}
	}
	if a.cfg.Count {
		rec[a.cfg.Dim] = a.cfg.Clip
	}
	return rec, clipped, nil
}

func norm2(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v * v
	}
	return math.Sqrt(s)
}

func (a *Aggregator) submit(ctx context.Context, o *op) (opResult, error) {
	select {
	case a.ops <- o:
	case <-a.closing:
		return opResult{}, fmt.Errorf("aggregate: %w", ErrClosed)
	case <-ctx.Done():
		return opResult{}, fmt.Errorf("aggregate: %w", ctx.Err())
	}
	select {
	case r := <-o.done:
		return r, nil
	case <-ctx.Done():
		return opResult{}, fmt.Errorf("aggregate: %w (the operation may still complete)", ctx.Err())
	}
}

// Commit closes the open step t: it adds step t's noise (drawn ahead,
// when step t-1 was released or the store opened), releases the
// workload's value, and makes the release, the noise state and the empty
// step t+1 durable in one transaction. It refuses (ErrBudgetExhausted)
// when the release would exceed the privacy budget.
func (a *Aggregator) Commit(ctx context.Context) (*Release, error) {
	r, err := a.submit(ctx, &op{kind: opCommit, done: make(chan opResult, 1)})
	if err != nil {
		return nil, err
	}
	return r.rel, r.err
}

// Close stops accepting work, finishes the operation in progress and closes
// the store. Calls waiting in Add or Commit return ErrClosed.
func (a *Aggregator) Close() error {
	var err error
	a.once.Do(func() {
		a.stopWarm()
		close(a.closing)
		<-a.done
		if a.exact != nil {
			a.exact.waitAhead()
		}
		err = a.db.Close()
	})
	return err
}

// writer serializes all mutations and batches contributions.
func (a *Aggregator) writer() {
	defer close(a.done)
	var batch []*op
	for {
		select {
		case <-a.closing:
			return
		case o := <-a.ops:
			batch = append(batch[:0], o)
		drain:
			for o.kind == opAdd && len(batch) < a.maxBatch {
				select {
				case o2 := <-a.ops:
					batch = append(batch, o2)
					if o2.kind == opCommit {
						break drain
					}
				default:
					break drain
				}
			}
			adds := batch
			var commit *op
			if last := batch[len(batch)-1]; last.kind == opCommit {
				adds, commit = batch[:len(batch)-1], last
			}
			if len(adds) > 0 {
				a.addBatch(adds)
			}
			if commit != nil {
				rel, err := a.commit()
				commit.done <- opResult{rel: rel, err: err}
			}
		}
	}
}

// fail stops the aggregator after a storage failure: every later call
// returns the *StoppedError.
func (a *Aggregator) fail(err error) error {
	a.failed = &StoppedError{Err: err}
	return a.failed
}

// addBatch applies a batch of contributions and makes it durable in one
// transaction before answering any of them.
func (a *Aggregator) addBatch(batch []*op) {
	if a.failed != nil {
		for _, o := range batch {
			o.done <- opResult{err: a.failed}
		}
		return
	}
	results, updated, cnt := a.applyBatch(batch)
	if err := a.db.Update(func(tx *bolt.Tx) error { return a.storeBatch(tx, updated, cnt) }); err != nil {
		err = a.fail(err)
		for _, o := range batch {
			o.done <- opResult{err: err}
		}
		return
	}
	a.batches.Add(1)
	maps.Copy(a.contributors, updated)
	a.cnt = cnt
	a.mu.Lock()
	a.snap.cnt = cnt
	a.mu.Unlock()
	for i, o := range batch {
		o.done <- results[i]
	}
}

// applyBatch checks each contribution of the batch against the rules and
// adds the admitted ones to the open step: their results, the
// contributors' updated steps and the counters after the batch.
func (a *Aggregator) applyBatch(batch []*op) ([]opResult, map[string][]int, counters) {
	t := a.released + 1
	results := make([]opResult, len(batch))
	updated := map[string][]int{}
	cnt := a.cnt
	for i, o := range batch {
		if o.reject == nil {
			o.reject = a.checkRules(o.contributor, t, updated)
		}
		if o.reject != nil {
			o.reject.Step = t
			results[i].err = o.reject
			cnt.rejected++
			continue
		}
		if a.exact != nil && !addInto(a.open.acci, o.veci) {
			o.reject = &RejectError{Contributor: o.contributor, Step: t, Reason: ErrStepFull, Detail: "the step's exact sum would overflow 64 bits"}
			results[i].err = o.reject
			cnt.rejected++
			continue
		}
		prev, ok := updated[o.contributor]
		if !ok {
			prev = a.contributors[o.contributor]
		}
		updated[o.contributor] = append(slices.Clip(prev), t)
		if a.exact == nil {
			for j, v := range o.vec {
				a.open.acc[j] += v
			}
		}
		a.open.count++
		cnt.accepted++
		if o.clipped {
			cnt.clipped++
		}
		results[i].step = t
	}
	return results, updated, cnt
}

// storeBatch makes a batch durable in tx: the open step, the counters and
// the contributors' steps.
func (a *Aggregator) storeBatch(tx *bolt.Tx, updated map[string][]int, cnt counters) error {
	meta, cb := tx.Bucket(bucketMeta), tx.Bucket(bucketContributors)
	if len(updated) > 0 {
		if err := meta.Put(keyOpen, a.open.encode()); err != nil {
			return err
		}
	}
	if err := meta.Put(keyCounters, cnt.encode()); err != nil {
		return err
	}
	for id, steps := range updated {
		if err := cb.Put([]byte(id), encodeSteps(steps)); err != nil {
			return err
		}
	}
	return nil
}

// checkRules enforces the planner's participation rule for a contribution
// to step t (privacy.ReleasePlan.Admit).
func (a *Aggregator) checkRules(id string, t int, updated map[string][]int) *RejectError {
	steps, ok := updated[id]
	if !ok {
		steps = a.contributors[id]
	}
	err := a.plan.Admit(steps, t)
	if err == nil {
		return nil
	}
	var r *privacy.Refusal
	if !errors.As(err, &r) {
		return &RejectError{Contributor: id, Reason: ErrRejected, Detail: err.Error()}
	}
	return &RejectError{Contributor: id, Reason: rejectReason(r.Rule), Detail: r.Reason}
}

// rejectReason is the reason a contribution refused by the planner's rule
// is rejected for.
func rejectReason(rule privacy.Rule) error {
	switch rule {
	case privacy.RuleHorizon:
		return ErrBudgetExhausted
	case privacy.RuleParticipationLimit:
		return ErrParticipationLimit
	case privacy.RuleSeparation:
		return ErrSeparation
	}
	return ErrRejected
}

// commit closes the open step: it computes the release (exactly, or on
// the float path), then makes the release, the noise state and the empty
// next step durable in one transaction.
func (a *Aggregator) commit() (*Release, error) {
	if a.failed != nil {
		return nil, a.failed
	}
	t := a.released + 1
	if t > a.n {
		return nil, fmt.Errorf("aggregate: %w: release %d would exceed the budget (epsilon %g at delta %g covers %d releases)", ErrBudgetExhausted, t, a.cfg.Epsilon, a.cfg.Delta, a.n)
	}
	// For t <= n the epsilon spent is at most eps(sigma) at the full
	// sensitivity, which the calibration made <= the budget.
	var rel []float64
	var puts, dels []storedVec
	var err error
	if a.exact != nil {
		rel, puts, dels, err = a.releaseExact(t)
	} else {
		rel, err = a.releaseFloat()
	}
	if err != nil {
		return nil, a.fail(err)
	}
	noiseState, err := a.noiseState()
	if err != nil {
		return nil, a.fail(err)
	}
	open := newOpen(t, a.dim, a.exact != nil)
	if err := a.db.Update(func(tx *bolt.Tx) error { return a.storeRelease(tx, t, rel, noiseState, open, puts, dels) }); err != nil {
		return nil, a.fail(err)
	}
	a.released, a.open = t, open
	if a.exact != nil {
		a.exact.drawAhead(t + 1)
	}
	a.mu.Lock()
	a.snap.released = t
	a.mu.Unlock()
	return a.newRelease(t, rel), nil
}

// releaseExact computes release t from the exact encoded sums: theta_t =
// (B Y)_t is the mechanism workload's value (the prefix sum, or for
// momentum sum_{i<=t} m_i, m_t = theta_t - theta_{t-1}); the window's
// difference is taken in storeRelease. puts and dels are the exact path's
// step sums and encoded rows to store and drop.
func (a *Aggregator) releaseExact(t int) (rel []float64, puts, dels []storedVec, err error) {
	theta, puts, dels, err := a.exact.commit(t, a.open.acci)
	if err != nil {
		return nil, nil, nil, err
	}
	rel = slices.Clone(theta)
	if a.cfg.Workload.Kind == Momentum {
		for i := range rel {
			rel[i] -= a.state[i]
		}
	}
	copy(a.state, theta)
	return rel, puts, dels, nil
}

// releaseFloat computes the release on the float path (tests only): the
// open step's sum plus its noise, accumulated into the workload's state.
func (a *Aggregator) releaseFloat() ([]float64, error) {
	if err := a.noise.Next(a.noiseBuf); err != nil {
		return nil, err
	}
	y := a.open.acc
	for i, w := range a.noiseBuf {
		y[i] += a.noiseStd * float64(w)
	}
	switch a.cfg.Workload.Kind {
	case PrefixSum, Window:
		for i, v := range y {
			a.state[i] += v
		}
	case Momentum:
		for i, v := range y {
			a.state[i] = a.cfg.Workload.Beta*a.state[i] + v
		}
	}
	return slices.Clone(a.state), nil
}

// storeRelease writes release t in tx: the exact path's puts and dels,
// the release (for a window, minus the prefix sum W steps back, which the
// record keeps beside the release), the noise state, the workload's state
// and the empty next step. rel becomes the released value.
func (a *Aggregator) storeRelease(tx *bolt.Tx, t int, rel []float64, noiseState []byte, open openRecord, puts, dels []storedVec) error {
	meta, rb := tx.Bucket(bucketMeta), tx.Bucket(bucketReleases)
	for _, p := range puts {
		if err := tx.Bucket(p.bucket).Put(p.key, p.body); err != nil {
			return err
		}
	}
	for _, d := range dels {
		if err := tx.Bucket(d.bucket).Delete(d.key); err != nil {
			return err
		}
	}
	if rb.Get(stepKey(t)) != nil {
		return fmt.Errorf("%w: release %d already stored", errCorrupt, t)
	}
	rec := appendFloats(nil, rel)
	if a.cfg.Workload.Kind == Window {
		if back := t - a.cfg.Workload.Window; back >= 1 {
			old := make([]float64, 2*a.dim)
			if err := decodeVec(fmt.Sprintf("release %d", back), rb.Get(stepKey(back)), old); err != nil {
				return err
			}
			for i := range rel {
				rel[i] -= old[a.dim+i]
			}
		}
		rec = appendFloats(appendFloats(nil, rel), a.state)
	}
	for _, kv := range []struct{ k, v []byte }{
		{keyNoise, seal(noiseState)}, {keyState, encodeVec(a.state)}, {keyOpen, open.encode()},
	} {
		if err := meta.Put(kv.k, kv.v); err != nil {
			return err
		}
	}
	return rb.Put(stepKey(t), seal(rec))
}

// epsAt is the epsilon spent by the first t releases, the planner's
// (privacy.ReleasePlan.EpsilonSpent).
func (a *Aggregator) epsAt(ctx context.Context, t int) (float64, error) {
	return a.plan.EpsilonSpent(ctx, t)
}

// warmLedger computes the prefix sensitivities of the grid from the
// current step on.
func (a *Aggregator) warmLedger(ctx context.Context) {
	a.mu.RLock()
	released := a.snap.released
	a.mu.RUnlock()
	for g := 1; ctx.Err() == nil; g *= 2 {
		if g >= released || g >= a.n {
			if _, err := a.epsAt(ctx, min(g, a.n)); err != nil {
				return
			}
		}
		if g >= a.n {
			return
		}
	}
}

// Release is one step's release. It is a copy: changing it changes nothing
// stored.
type Release struct {
	// Step is the 1-based step.
	Step int
	// Sum is the workload's value of the vector sum at Step (prefix,
	// momentum-weighted or windowed), with noise.
	Sum []float64
	// HasCount says whether Count is released (Config.Count).
	HasCount bool
	// Count is the workload's value of the number of contributions.
	Count float64
}

// Mean is Sum / max(Count, 1), or nil without a count.
func (r *Release) Mean() []float64 {
	if !r.HasCount {
		return nil
	}
	m := make([]float64, len(r.Sum))
	c := math.Max(r.Count, 1)
	for i, v := range r.Sum {
		m[i] = v / c
	}
	return m
}

func (a *Aggregator) newRelease(t int, rec []float64) *Release {
	r := &Release{Step: t, Sum: slices.Clone(rec[:a.cfg.Dim])}
	if a.cfg.Count {
		r.HasCount, r.Count = true, rec[a.cfg.Dim]/a.cfg.Clip
	}
	return r
}

// Release returns release t (1-based) from the store, the same values
// Commit returned; ErrNotReleased if it does not exist yet.
func (a *Aggregator) Release(t int) (*Release, error) {
	var rec []float64
	err := a.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketReleases).Get(stepKey(t))
		if v == nil || t < 1 {
			return fmt.Errorf("aggregate: %w: step %d", ErrNotReleased, t)
		}
		body, err := unseal(fmt.Sprintf("release %d", t), v)
		if err != nil {
			return err
		}
		if len(body) < 8*a.dim {
			return fmt.Errorf("aggregate: release %d: %w", t, errCorrupt)
		}
		rec = make([]float64, a.dim)
		readFloats(rec, body)
		return nil
	})
	if err != nil {
		if errors.Is(err, bolt.ErrDatabaseNotOpen) {
			return nil, fmt.Errorf("aggregate: %w", ErrClosed)
		}
		return nil, err
	}
	return a.newRelease(t, rec), nil
}

// fingerprintDiff names the fields on which two fingerprints differ.
func fingerprintDiff(stored, asked []byte) string {
	var a, b map[string]any
	if json.Unmarshal(stored, &a) != nil || json.Unmarshal(asked, &b) != nil {
		return fmt.Sprintf("store has %s, asked for %s", stored, asked)
	}
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
			diffs = append(diffs, fmt.Sprintf("%s: store has %v, asked for %v", k, a[k], b[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: store has none, asked for %v", k, b[k]))
		}
	}
	return strings.Join(diffs, "; ")
}

// noiseState is the noise source's state to persist.
func (a *Aggregator) noiseState() ([]byte, error) {
	if a.exact != nil {
		return a.exact.noise.MarshalBinary()
	}
	return a.noise.MarshalBinary()
}

// SeededNoise returns, for a store with a fixed Config.Seed (tests only),
// the noise part of releases 1..t: Release(s).Sum minus the workload's
// value of the true sums, with the count coordinate (times Clip) appended
// when Config.Count is set. It redraws the noise from the seed with the
// exact arithmetic, and is refused for a store seeded from crypto/rand or
// on the float path.
func (a *Aggregator) SeededNoise(t int) ([][]float64, error) {
	if a.cfg.Seed == nil || a.exact == nil {
		return nil, invalidf("seeded noise: only for a store with a fixed seed and the exact arithmetic")
	}
	if t < 0 || t > a.n {
		return nil, invalidf("seeded noise: step %d outside [0, %d]", t, a.n)
	}
	theta, err := a.exact.seededNoise(a.cfg.Seed, t)
	if err != nil {
		return nil, err
	}
	out := make([][]float64, t)
	for s := range theta {
		out[s] = slices.Clone(theta[s])
		for i := range out[s] {
			switch {
			case a.cfg.Workload.Kind == Momentum && s > 0:
				out[s][i] -= theta[s-1][i]
			case a.cfg.Workload.Kind == Window && s >= a.cfg.Workload.Window:
				out[s][i] -= theta[s-a.cfg.Workload.Window][i]
			}
		}
	}
	return out, nil
}

// Snapshot writes a consistent copy of the whole store to w: a file that
// Open continues from (noise state, open step, participation records,
// releases). Taken right after Commit by the only caller of Add and
// Commit, it is the state after that release. It returns the bytes
// written.
func (a *Aggregator) Snapshot(w io.Writer) (int64, error) {
	var n int64
	err := a.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		if errors.Is(err, bolt.ErrDatabaseNotOpen) {
			return n, fmt.Errorf("aggregate: %w", ErrClosed)
		}
		return n, fmt.Errorf("aggregate: snapshot: %w", err)
	}
	return n, nil
}
