package main

// Replicated mode (-nats URL,...): the service on a NATS JetStream cluster.
//
//   - Front-ends (any number, stateless) validate a contribution, publish
//     it to the log stream <service>_LOG with Nats-Msg-Id de-duplication
//     (the contributor id plus the request's Idempotency-Key, or a random
//     id) and acknowledge only after JetStream confirmed it (stored on a
//     majority of the stream's replicas).
//   - One aggregator at a time holds the lease key "leader" of the KV
//     bucket <service>_lease (TTL -lease-ttl, renewed by Update with the
//     expected revision). It runs the single-node engine
//     (aggregate.Aggregator) on a local cache file, applying the log in
//     order: the bounding rules, the clip and the exact arithmetic are
//     those of the single-node mode, code and all.
//   - A commit is a log entry too. The aggregator commits, writes a
//     snapshot of its engine (noise state, open step, participation
//     records) to the object store <service>_snap, then creates the key
//     rel.<t> of the KV bucket <service>_state holding release t, the log
//     position it covers and the snapshot's name. Create fails if the key
//     exists: two aggregators can never write two releases for one step,
//     and an aggregator that finds the key taken stops and restarts from
//     the stored state.
//   - A standby keeps an engine restored from the last release record's
//     snapshot and applied to the log's contributions after the position
//     it covers (up to the next commit), and takes the lease as soon as
//     it is deleted (a clean stop) or expired (a crash): it continues
//     with the noise state stored with the last release, never drawing a
//     step's noise again for publication nor reusing it.
//   - While it applies the log the leader publishes a heartbeat (an
//     empty decision batch); a front-end that hears none answers a
//     logged contribution 202 at once instead of waiting for a decision.
//   - Every read of <service>_state goes to its stream's leader
//     (stateGet), so it sees every write acknowledged before it.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/internal/buildinfo"
	"github.com/dpmf-go/dpmf/internal/natsconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func validService(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// replicated is a front-end of the replicated mode, and, with
// -aggregator, a candidate for the aggregator's lease.
type replicated struct {
	o       options
	id      string // this process, in the lease and snapshot names
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subjAdd string
	subjCmt string
	subjDec string
	state   jetstream.KeyValue
	lease   jetstream.KeyValue
	snaps   jetstream.ObjectStore
	sub     *nats.Subscription

	// decisionWait bounds how long a front-end waits for the
	// aggregator's decision on a contribution before answering 202.
	decisionWait time.Duration
	// aliveWindow: a front-end that heard nothing from a leading
	// aggregator (decisions or its heartbeat, every aliveEvery) for this
	// long answers 202 as soon as the log confirmed a contribution,
	// rather than waiting decisionWait for a decision none may make
	// (no leader, or one taking over). 0: always wait decisionWait.
	aliveWindow time.Duration
	lastAlive   atomic.Int64 // unix nanoseconds of the last message on subjDec

	mu      sync.Mutex
	waiters map[string]chan decision
	ledger  aggregate.Ledger             // the ledger last served, for monotonicity
	mech    *aggregate.StrategyMechanism // decoded from a snapshot: storedMechanism

	// warmRelease is the release a standby's engine is restored at
	// (-1: none), for the logs and the tests.
	warmRelease atomic.Int64

	// logf reports the aggregator's transitions (lease won, lost, errors).
	logf func(format string, args ...any)
}

// decision is the aggregator's answer to one log entry, published on
// <service>.decided for the front-end that waits for it.
type decision struct {
	ID     string `json:"id"`
	Seq    uint64 `json:"seq"`
	Step   int    `json:"step,omitempty"`
	Reason int    `json:"reason,omitempty"` // 1 + index in rejectReasons; 0: accepted
	Detail string `json:"detail,omitempty"`
}

var rejectReasons = []error{aggregate.ErrDimension, aggregate.ErrNotFinite, aggregate.ErrContributor,
	aggregate.ErrParticipationLimit, aggregate.ErrSeparation, aggregate.ErrBudgetExhausted, aggregate.ErrStepFull}

// releaseRecord is the value of rel.<t>: release t, the log position it
// covers (the sequence of the commit entry), the snapshot of the engine
// after it, and the ledger after it.
type releaseRecord struct {
	Step     int              `json:"step"`
	Seq      uint64           `json:"seq"`
	Sum      []float64        `json:"sum"`
	HasCount bool             `json:"has_count,omitempty"`
	Count    float64          `json:"count,omitempty"`
	Snapshot string           `json:"snapshot"`
	SnapSHA  string           `json:"snapshot_sha256"`
	Ledger   aggregate.Ledger `json:"ledger"`
	Leader   string           `json:"leader"`
}

func relKey(t int) string { return "rel." + strconv.Itoa(t) }

// dialReplicated connects to the cluster and creates (or checks) the
// stream and buckets.
func dialReplicated(ctx context.Context, o options) (*replicated, error) {
	idb := make([]byte, 6)
	rand.Read(idb)
	host, _ := os.Hostname()
	r := &replicated{
		o: o, id: fmt.Sprintf("%s-%d-%s", strings.ReplaceAll(host, ".", "_"), os.Getpid(), hex.EncodeToString(idb)),
		stream: o.service + "_LOG", subjAdd: o.service + ".log.add", subjCmt: o.service + ".log.commit",
		subjDec: o.service + ".decided", decisionWait: 2 * time.Second, aliveWindow: 5 * aliveEvery, waiters: map[string]chan decision{},
		logf: func(string, ...any) {},
	}
	r.warmRelease.Store(-1)
	opts := []nats.Option{nats.Name("dpserve " + r.id), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second)}
	sec, err := o.natsSecurity().Options()
	if err != nil {
		return nil, usageError{err.Error()}
	}
	opts = append(opts, sec...)
	if !natsconn.Loopback(o.nats) {
		// Off this machine the log's raw contributions and the noise
		// state travel over the network: TLS, the servers' certificates
		// checked (-nats-ca, or the system's roots).
		opts = append(opts, nats.Secure())
	}
	nc, err := nats.Connect(o.nats, opts...)
	if errors.Is(err, nats.ErrSecureConnWanted) {
		return nil, usagef("-nats %s: the servers offer no TLS, which a NATS server off this machine needs (its traffic holds the raw contributions and the noise state): configure tls on the servers", natsconn.Redact(o.nats))
	}
	if err != nil {
		return nil, usagef("-nats %s: %v", natsconn.Redact(o.nats), err)
	}
	r.nc = nc
	if r.js, err = jetstream.New(nc); err != nil {
		nc.Close()
		return nil, err
	}
	if err := r.setup(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	if r.sub, err = nc.Subscribe(r.subjDec, r.onDecisions); err != nil {
		nc.Close()
		return nil, err
	}
	return r, nil
}

// setup creates (or checks) the log, the buckets and the configuration
// every node must share. A request sent while JetStream elects a meta or
// stream leader (a node starting or restarting) gets no answer, so each
// step is retried in attempts of 5 s for up to 60 s in all; only a
// configuration that differs from the cluster's is final at once.
func (r *replicated) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	kv := func(dst *jetstream.KeyValue, cfg jetstream.KeyValueConfig) func(context.Context) error {
		return func(ctx context.Context) (err error) {
			*dst, err = r.js.CreateOrUpdateKeyValue(ctx, cfg)
			return err
		}
	}
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"replicated log " + r.stream, func(ctx context.Context) error {
			_, err := r.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
				Name: r.stream, Subjects: []string{r.o.service + ".log.>"}, Storage: jetstream.FileStorage,
				Replicas: r.o.replicas, Duplicates: 10 * time.Minute, Retention: jetstream.LimitsPolicy, MaxAge: r.o.logMaxAge,
			})
			return err
		}},
		{"state bucket", kv(&r.state, jetstream.KeyValueConfig{Bucket: r.o.service + "_state",
			Replicas: r.o.replicas, Storage: jetstream.FileStorage, History: 1})},
		{"lease bucket", kv(&r.lease, jetstream.KeyValueConfig{Bucket: r.o.service + "_lease",
			Replicas: r.o.replicas, Storage: jetstream.FileStorage, TTL: r.o.leaseTTL})},
		{"snapshot store", func(ctx context.Context) (err error) {
			r.snaps, err = r.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: r.o.service + "_snap",
				Replicas: r.o.replicas, Storage: jetstream.FileStorage})
			return err
		}},
		{"stored configuration", r.checkConfig},
	}
	for _, st := range steps {
		var last error
		for {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			err := st.do(actx)
			acancel()
			if err == nil {
				break
			}
			if errors.Is(err, aggregate.ErrStoreMismatch) {
				return err
			}
			if ctx.Err() != nil {
				if last == nil || last.Error() == err.Error() {
					return fmt.Errorf("%s: %w", st.what, err)
				}
				return fmt.Errorf("%s: %w (before: %v)", st.what, err, last)
			}
			last = err
			time.Sleep(250 * time.Millisecond)
		}
	}
	return nil
}

// checkConfig stores this node's release-determining flags, or checks
// them against those stored by the first node: every node must run with
// the same.
func (r *replicated) checkConfig(ctx context.Context) error {
	fp, _ := json.Marshal(map[string]any{"dim": r.o.dim, "mechanism": r.o.mechanism, "workload": r.o.workload,
		"horizon": r.o.horizon, "epsilon": r.o.epsilon, "delta": r.o.delta, "clip": r.o.clip, "k": r.o.k, "b": r.o.b,
		"count": r.o.count, "seed_sha256": seedHash(r.o.seed), "noise_memory": r.o.noiseMemory})
	_, err := r.state.Create(ctx, "config", fp)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	e, err := r.stateGet(ctx, "config")
	if err != nil {
		return err
	}
	if !bytes.Equal(e.value, fp) {
		return fmt.Errorf("%w: service %s on the cluster has %s, this node %s", aggregate.ErrStoreMismatch, r.o.service, e.value, fp)
	}
	return nil
}

func seedHash(s string) string {
	if s == "" {
		return ""
	}
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func (r *replicated) close() {
	if r.sub != nil {
		r.sub.Unsubscribe()
	}
	r.nc.Close()
}

func (r *replicated) onDecisions(m *nats.Msg) {
	var ds []decision
	if json.Unmarshal(m.Data, &ds) != nil {
		return
	}
	// Any batch, the empty one of the heartbeat included, is a sign of
	// a leader applying the log.
	r.lastAlive.Store(time.Now().UnixNano())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range ds {
		if ch, ok := r.waiters[d.ID]; ok {
			select {
			case ch <- d:
			default:
			}
		}
	}
}

func (r *replicated) wait(id string) chan decision {
	ch := make(chan decision, 1)
	r.mu.Lock()
	r.waiters[id] = ch
	r.mu.Unlock()
	return ch
}

func (r *replicated) unwait(id string) {
	r.mu.Lock()
	delete(r.waiters, id)
	r.mu.Unlock()
}

// msgID is the log's de-duplication id (Nats-Msg-Id) of a request: with
// an Idempotency-Key, one id per kind, contributor and key, so that a
// retry is counted once and a contributor cannot suppress or probe
// another's request; without one, a fresh random id (kind:32 hex digits).
func msgID(ctx context.Context, kind, contributor string) string {
	if k, ok := ctx.Value(idempotencyKey{}).(string); ok && k != "" {
		return keyedID(kind, contributor, k)
	}
	b := make([]byte, 16)
	rand.Read(b)
	return kind + ":" + hex.EncodeToString(b)
}

// keyedID is the id of a request with an Idempotency-Key: distinct for
// distinct (kind, contributor, key). The releases before wrote
// kind:contributor:key, which is ambiguous when the contributor id holds
// a ':' (a with key b:1 and a:b with key 1 collide) and which a header
// value alters when an id holds a line break. That form is kept where it
// is unambiguous, a contributor id of printable ASCII without ':' and a
// key of printable ASCII, so that a retry across an upgrade (the log
// de-duplicates for 10 minutes) is still counted once; every other
// request gets kind#SHA-256(length-prefixed contributor, length-prefixed
// key) in hex. The forms cannot meet: an old-form id has ':' right after
// the kind, a hashed one '#'; the random ids have one ':', keyed ones
// two or more. The log's ids are only compared, never parsed, so a
// replay of a log written before reads the same.
func keyedID(kind, contributor, key string) string {
	if printable(contributor) && !strings.Contains(contributor, ":") && printable(key) {
		return kind + ":" + contributor + ":" + key
	}
	h := sha256.New()
	for _, s := range []string{contributor, key} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	return kind + "#" + hex.EncodeToString(h.Sum(nil))
}

// printable reports whether s is printable ASCII (a header value carries
// it unchanged) and neither starts nor ends with a space (which a header
// value loses).
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return !strings.HasPrefix(s, " ") && !strings.HasSuffix(s, " ")
}

// Dim is the dimension of a contribution.
func (r *replicated) Dim() int { return r.o.dim }

// Add validates the contribution, publishes it to the log and returns its
// step once the aggregator decided (or a *loggedError after decisionWait).
func (r *replicated) Add(ctx context.Context, contributor string, vec []float64) (int, error) {
	if rej := validateContribution(contributor, vec, r.o.dim); rej != nil {
		return 0, rej
	}
	id := msgID(ctx, "add", contributor)
	ch := r.wait(id)
	defer r.unwait(id)
	m := nats.NewMsg(r.subjAdd)
	m.Data = encodeEntry(contributor, vec)
	ack, err := r.js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
	if err != nil {
		return 0, httpError{status: http.StatusServiceUnavailable, retryAfter: 1,
			msg: "the replicated log did not confirm the contribution; retry with the same Idempotency-Key header: " + err.Error()}
	}
	if ack.Duplicate {
		// A retry of a logged contribution: counted once, decided before.
		return 0, &loggedError{seq: ack.Sequence}
	}
	t := time.NewTimer(r.decisionWait)
	defer t.Stop()
	check := time.NewTicker(aliveEvery / 2)
	defer check.Stop()
	for !r.leaderSilent() {
		select {
		case d := <-ch:
			return d.Step, d.err(contributor)
		case <-t.C:
			return 0, &loggedError{seq: ack.Sequence}
		case <-ctx.Done():
			return 0, &loggedError{seq: ack.Sequence}
		case <-check.C:
		}
	}
	// No leader applies the log now: the contribution is durable in it
	// and will be decided once one does; answering at once keeps the
	// front-end's capacity (-max-inflight) for the requests that follow.
	select {
	case d := <-ch:
		return d.Step, d.err(contributor)
	default:
	}
	return 0, &loggedError{seq: ack.Sequence}
}

// aliveEvery is the leading aggregator's heartbeat period: while it
// applies the log it publishes an empty decision batch at least this
// often.
const aliveEvery = 100 * time.Millisecond

// leaderSilent reports whether no leading aggregator was heard from
// within aliveWindow.
func (r *replicated) leaderSilent() bool {
	return r.aliveWindow > 0 && time.Since(time.Unix(0, r.lastAlive.Load())) > r.aliveWindow
}

func (d decision) err(contributor string) error {
	if d.Reason == 0 {
		return nil
	}
	reason := aggregate.ErrRejected
	if d.Reason-1 < len(rejectReasons) {
		reason = rejectReasons[d.Reason-1]
	}
	return &aggregate.RejectError{Contributor: contributor, Step: d.Step, Reason: reason, Detail: d.Detail}
}

func validateContribution(contributor string, vec []float64, dim int) error {
	rej := func(reason error, format string, args ...any) error {
		return &aggregate.RejectError{Contributor: contributor, Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	if contributor == "" || len(contributor) > aggregate.MaxContributorLen {
		return rej(aggregate.ErrContributor, "id has %d bytes, want 1..%d", len(contributor), aggregate.MaxContributorLen)
	}
	if len(vec) != dim {
		return rej(aggregate.ErrDimension, "vector has %d values, want %d", len(vec), dim)
	}
	for i, v := range vec {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return rej(aggregate.ErrNotFinite, "value %d is %v", i, v)
		}
	}
	return nil
}

// encodeEntry is a contribution in the log: the id's length (uint16), the
// id, the vector (float64 little-endian).
func encodeEntry(contributor string, vec []float64) []byte {
	b := binary.LittleEndian.AppendUint16(make([]byte, 0, 2+len(contributor)+8*len(vec)), uint16(len(contributor)))
	return atomicfile.AppendFloats(append(b, contributor...), vec)
}

func decodeEntry(b []byte) (string, []float64, error) {
	if len(b) < 2 {
		return "", nil, errors.New("short log entry")
	}
	n := int(binary.LittleEndian.Uint16(b))
	if len(b) < 2+n || (len(b)-2-n)%8 != 0 {
		return "", nil, errors.New("malformed log entry")
	}
	id, rest := string(b[2:2+n]), b[2+n:]
	vec, err := atomicfile.DecodeFloats[float64](rest, len(rest)/8)
	return id, vec, err
}

// Commit logs a commit and returns the release the aggregator made for it.
func (r *replicated) Commit(ctx context.Context) (*aggregate.Release, error) {
	id := msgID(ctx, "commit", "")
	ch := r.wait(id)
	defer r.unwait(id)
	ack, err := r.js.PublishMsg(ctx, nats.NewMsg(r.subjCmt), jetstream.WithMsgID(id))
	if err != nil {
		return nil, httpError{status: http.StatusServiceUnavailable, retryAfter: 1, msg: "the replicated log did not confirm the commit: " + err.Error()}
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case d := <-ch:
		if d.Reason != 0 {
			return nil, fmt.Errorf("%w: %s", rejectReasons[d.Reason-1], d.Detail)
		}
		// A read may reach a replica that has not the release yet.
		for {
			rel, err := r.Release(d.Step)
			if !errors.Is(err, aggregate.ErrNotReleased) || ctx.Err() != nil {
				return rel, err
			}
			select {
			case <-ctx.Done():
			case <-t.C:
				return nil, err
			case <-time.After(20 * time.Millisecond):
			}
		}
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, httpError{status: http.StatusServiceUnavailable, retryAfter: 1,
		msg: fmt.Sprintf("the commit is in the log at sequence %d but no aggregator applied it yet (is one holding the lease?)", ack.Sequence)}
}

func (r *replicated) record(ctx context.Context, t int) (*releaseRecord, uint64, error) {
	e, err := r.stateGet(ctx, relKey(t))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("aggregate: %w: step %d", aggregate.ErrNotReleased, t)
	}
	if err != nil {
		return nil, 0, httpError{status: http.StatusServiceUnavailable, retryAfter: 1, msg: "reading release " + strconv.Itoa(t) + ": " + err.Error()}
	}
	var rec releaseRecord
	if err := json.Unmarshal(e.value, &rec); err != nil || rec.Step != t || len(rec.Sum) != r.o.dim {
		return nil, 0, fmt.Errorf("release record %d: corrupt (%v)", t, err)
	}
	return &rec, e.rev, nil
}

// Release returns release t from the replicated state.
func (r *replicated) Release(t int) (*aggregate.Release, error) {
	if t < 1 {
		return nil, fmt.Errorf("aggregate: %w: step %d", aggregate.ErrNotReleased, t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, _, err := r.record(ctx, t)
	if err != nil {
		return nil, err
	}
	// The ledger this node serves from now on counts the release it
	// serves, even when the state cannot be read then.
	r.mu.Lock()
	if rec.Ledger.Steps > r.ledger.Steps {
		r.ledger = rec.Ledger
	}
	r.mu.Unlock()
	return &aggregate.Release{Step: rec.Step, Sum: rec.Sum, HasCount: rec.HasCount, Count: rec.Count}, nil
}

// Ledger is the ledger the aggregator last wrote, or the one stored with
// the last release when that is newer: every release made before the call
// (so every release this node served) is counted, even when the
// aggregator stopped between storing a release and writing the ledger.
// Steps never decrease.
func (r *replicated) Ledger() aggregate.Ledger {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var l aggregate.Ledger
	ok := false
	if e, err := r.stateGet(ctx, "ledger"); err == nil && json.Unmarshal(e.value, &l) == nil {
		ok = true
	}
	if t, err := r.head(ctx); err == nil && t > 0 && (!ok || t > l.Steps) {
		rec, _, err := r.record(ctx, t)
		ok = err == nil
		if ok {
			l = rec.Ledger
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		// A ledger written by an aggregator replaying the log may be
		// older than one this front-end served: never serve fewer steps
		// than before.
		if l.Steps < r.ledger.Steps {
			return r.ledger
		}
		r.ledger = l
		return l
	}
	if r.ledger.Horizon > 0 {
		return r.ledger
	}
	return aggregate.Ledger{EpsilonBudget: r.o.epsilon, EpsilonRemaining: r.o.epsilon, Delta: r.o.delta, Horizon: r.o.horizon,
		Clip: r.o.clip, Covered: r.o.seed == "", Assumptions: []string{"no aggregator has written the ledger yet (none elected, or no contribution applied)"}}
}

// head is the last release made: the head key, then any release created
// after it (an aggregator that stopped between the two writes).
func (r *replicated) head(ctx context.Context) (int, error) {
	t := 0
	e, err := r.stateGet(ctx, "head")
	switch {
	case err == nil:
		if t, err = strconv.Atoi(string(e.value)); err != nil {
			return 0, fmt.Errorf("head: %w", err)
		}
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, err
	}
	for {
		_, err := r.stateGet(ctx, relKey(t+1))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return t, nil
		}
		if err != nil {
			return 0, err
		}
		t++
	}
}

// errDeposed: another aggregator wrote the release this one was about to
// write, or took the lease.
var errDeposed = errors.New("deposed: another aggregator holds the lease or wrote the release")

// runAggregator stands for the lease until ctx ends, and leads while it
// holds it. A standby tries to take the lease whenever the holder gives
// it up (it watches the key) and otherwise every leaseTTL/20, so it takes
// over within that of the lease's expiry after a crash.
func (r *replicated) runAggregator(ctx context.Context) {
	freed := r.watchLease(ctx)
	var ws *warmStandby
	defer func() {
		if ws != nil {
			ws.take().close()
		}
	}()
	for ctx.Err() == nil {
		start := time.Now()
		rev, err := r.lease.Create(ctx, "leader", []byte(r.id))
		if err != nil {
			if ws == nil {
				// Standing by: keep an engine ready.
				ws = r.startWarm(ctx)
			}
			select {
			case <-ctx.Done():
			case <-freed:
			case <-time.After(r.o.leaseTTL / 20):
			}
			continue
		}
		r.logf("aggregator %s: lease won", r.id)
		var warm *warmEngine
		if ws != nil {
			warm = ws.take()
			ws = nil
		}
		lctx, cancel := context.WithCancel(ctx)
		var held atomic.Uint64 // the lease's revision this holder last wrote
		held.Store(rev)
		go r.renew(lctx, cancel, &held, start)
		// Give the lease up so that a standby (or this process) leads
		// without waiting for it to expire; on a clean stop (ctx
		// ended) as soon as the log is no longer applied, before the
		// engine is closed. A crash gives nothing up: the lease expires.
		release := sync.OnceFunc(func() {
			cancel()
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.leaseTTL)
			r.releaseLease(dctx, held.Load())
			dcancel()
		})
		err = r.lead(lctx, warm, func() {
			if ctx.Err() != nil {
				release()
			}
		})
		cancel()
		if ctx.Err() == nil {
			r.logf("aggregator %s: stopped leading: %v", r.id, err)
		}
		release()
		if ctx.Err() == nil {
			time.Sleep(r.o.leaseTTL / 10)
		}
	}
}

// watchLease returns a channel that receives when the lease key is
// deleted (a holder gave it up); without a watch (an error), nothing is
// sent and the standby polls.
func (r *replicated) watchLease(ctx context.Context) <-chan struct{} {
	freed := make(chan struct{}, 1)
	w, err := r.lease.Watch(ctx, "leader", jetstream.UpdatesOnly())
	if err != nil {
		return freed
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil && e.Operation() != jetstream.KeyValuePut {
					select {
					case freed <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	return freed
}

// renew keeps the lease (won by a request sent at since); when an Update
// with the expected revision fails (another holder, or the cluster
// unreachable for long) leading stops.
//
// The lease expires leaseTTL after the server stored the last update,
// which is after the update was sent: leading stops at the first renewal
// attempt more than leaseTTL/2 after the last successful update was sent,
// so by about 3/4 leaseTTL after that (renewals every leaseTTL/5, each
// given up after leaseTTL/4), before the lease can expire. Safety does
// not rest on this: a release is stored only by creating its key (see
// checkpoint), and a leader that finds the key taken stops.
func (r *replicated) renew(ctx context.Context, stop context.CancelFunc, held *atomic.Uint64, since time.Time) {
	defer stop()
	rev := held.Load()
	tick := time.NewTicker(r.o.leaseTTL / 5)
	defer tick.Stop()
	last := since
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Now()
		uctx, cancel := context.WithTimeout(ctx, r.o.leaseTTL/4)
		nrev, err := r.lease.Update(uctx, "leader", []byte(r.id), rev)
		cancel()
		switch {
		case err == nil:
			rev, last = nrev, sent
			held.Store(rev)
		case errors.Is(err, jetstream.ErrKeyExists) || time.Since(last) > r.o.leaseTTL/2:
			// Someone else holds it, or it may have expired: a standby
			// may lead now.
			r.logf("aggregator %s: lease not renewed: %v", r.id, err)
			return
		}
	}
}

// releaseLease gives the lease up (a clean shutdown), so a standby takes
// over at once: deleted if its revision is still rev, the one this
// holder last wrote (or, when a renewal's reply was lost, the one read).
func (r *replicated) releaseLease(ctx context.Context, rev uint64) {
	if r.lease.Delete(ctx, "leader", jetstream.LastRevision(rev)) == nil {
		return
	}
	e, err := r.lease.Get(ctx, "leader")
	if err == nil && string(e.Value()) == r.id {
		r.lease.Delete(ctx, "leader", jetstream.LastRevision(e.Revision()))
	}
}

// warmEngine is an engine restored at the state after a release, in its
// own directory.
type warmEngine struct {
	agg      *aggregate.Aggregator
	dir      string
	released int
	seq      uint64 // the log position applied
	atCommit bool   // the log holds a commit right after seq
}

func (w *warmEngine) close() {
	if w != nil {
		w.agg.Close()
		os.RemoveAll(w.dir)
	}
}

// restoreWarm restores the engine at the last release in a new directory.
func (r *replicated) restoreWarm(ctx context.Context) (*warmEngine, error) {
	dir, err := os.MkdirTemp(r.o.workDir, "dpserve-aggregator-")
	if err != nil {
		return nil, err
	}
	agg, released, seq, err := r.restore(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &warmEngine{agg: agg, dir: dir, released: released, seq: seq}, nil
}

// warmStandby is the engine a standby keeps restored at the last release
// and applied to the log's contributions after it, so that it leads
// without restoring (decoding the mechanism and calibrating the noise)
// or replaying the log.
type warmStandby struct {
	stop context.CancelFunc
	done chan *warmEngine // keepWarm's engine once it ended
}

func (r *replicated) startWarm(ctx context.Context) *warmStandby {
	wctx, cancel := context.WithCancel(ctx)
	ws := &warmStandby{stop: cancel, done: make(chan *warmEngine, 1)}
	go func() { ws.done <- r.keepWarm(wctx) }()
	return ws
}

// take stops keeping the engine warm and returns it (nil if none).
func (ws *warmStandby) take() *warmEngine {
	ws.stop()
	return <-ws.done
}

// keepWarm checks every second whether the last release changed and
// then restores the engine again, at most every warmEvery (a restore
// costs a fraction of a second of CPU); in between it applies the log's
// contributions after the release to the engine, as the leader does,
// without publishing its decisions, up to the first commit (only a
// leader commits). It returns the engine when ctx ends.
func (r *replicated) keepWarm(ctx context.Context) *warmEngine {
	var (
		e    *warmEngine
		last time.Time
		tail struct {
			it   jetstream.MessagesContext
			msgs <-chan logMsg
			stop context.CancelFunc
		}
	)
	stopTail := func() {
		if tail.it != nil {
			tail.stop()
			tail.it.Stop()
			tail.it, tail.msgs = nil, nil
		}
	}
	defer r.warmRelease.Store(-1)
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		t, err := r.head(ctx)
		if ctx.Err() != nil {
			stopTail()
			return e
		}
		if err == nil && (e == nil || e.released != t) && time.Since(last) >= warmEvery {
			stopTail()
			last = time.Now()
			if ne, err := r.restoreWarm(ctx); err == nil {
				e.close()
				e = ne
				r.warmRelease.Store(int64(e.released))
			}
		}
		if e != nil && !e.atCommit && tail.it == nil {
			var rctx context.Context
			rctx, tail.stop = context.WithCancel(ctx)
			if tail.it, tail.msgs, err = r.readLog(rctx, e.seq); err != nil {
				tail.stop()
				tail.it, tail.msgs = nil, nil
			}
		}
	apply:
		for {
			select {
			case <-ctx.Done():
				break apply
			case <-check.C:
				break apply
			case n := <-tail.msgs:
				switch {
				case n.err != nil:
					stopTail()
					break apply
				case n.m.Subject() == r.subjCmt:
					e.atCommit = true
					stopTail()
					break apply
				}
				// Not cancelled with ctx: an entry is applied whole.
				if _, err := r.apply(context.WithoutCancel(ctx), e.agg, n.m, &e.seq, nil); err != nil {
					stopTail()
					e.close()
					e = nil
					r.warmRelease.Store(-1)
					break apply
				}
			}
		}
	}
}

// warmEvery: a standby restores its engine at most this often.
const warmEvery = 5 * time.Second

// storedMechanism is the mechanism the snapshots hold, decoded from the
// store at path the first time and remembered: every snapshot descends
// from the store release 1 was made with (a release is stored only by
// creating its key), and the mechanism is written once, when a store is
// made. Decoding it took most of a restore's time; Open still checks
// the store's fingerprint of the configuration. nil when it cannot be
// read (openAggregator then reads it and reports why).
func (r *replicated) storedMechanism(path string) *aggregate.StrategyMechanism {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mech == nil {
		_, _, _, schema, err := releaseFlags(r.o)
		if err != nil {
			return nil
		}
		if r.mech, err = aggregate.StoredMechanism(path, schema); err != nil {
			r.mech = nil
		}
	}
	return r.mech
}

// restore opens the engine at the state of the last release.
func (r *replicated) restore(ctx context.Context, dir string) (*aggregate.Aggregator, int, uint64, error) {
	t, err := r.head(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	path := filepath.Join(dir, "aggregator.db")
	var seq uint64
	if t > 0 {
		rec, _, err := r.record(ctx, t)
		if err != nil {
			return nil, 0, 0, err
		}
		data, err := r.snapshot(ctx, rec)
		if err != nil {
			return nil, 0, 0, err
		}
		if err := gunzipFile(path, data); err != nil {
			return nil, 0, 0, fmt.Errorf("snapshot %s: %w", rec.Snapshot, err)
		}
		seq = rec.Seq
	}
	o := r.o
	o.store, o.noSync = path, true
	if t > 0 {
		o.stored = r.storedMechanism(path)
	}
	agg, err := openAggregator(ctx, o)
	if err != nil {
		return nil, 0, 0, err
	}
	if got := agg.Ledger().Steps; got != t {
		agg.Close()
		return nil, 0, 0, fmt.Errorf("snapshot of release %d holds %d releases", t, got)
	}
	return agg, t, seq, nil
}

// snapshot reads the snapshot rec names and checks its checksum. The
// object store's reads may be answered by a replica that is catching up
// and does not hold it yet (it was stored before the record was
// created), so a failed read is retried for up to 10 s.
func (r *replicated) snapshot(ctx context.Context, rec *releaseRecord) ([]byte, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := r.snaps.GetBytes(ctx, rec.Snapshot)
		if err == nil {
			if h := sha256.Sum256(data); hex.EncodeToString(h[:]) == rec.SnapSHA {
				return data, nil
			}
			err = errors.New("checksum mismatch")
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("snapshot %s: %w", rec.Snapshot, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func gunzipFile(path string, data []byte) error {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, zr); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// lead applies the log in order while ctx lasts, starting from warm (an
// engine a standby restored ahead) if it is at the last release, and
// otherwise from the stored state. stopped (if not nil) is called once
// the log is no longer applied, before the engine is closed.
func (r *replicated) lead(ctx context.Context, warm *warmEngine, stopped func()) error {
	how := "engine kept ready while standing by"
	if warm != nil {
		if t, err := r.head(ctx); err != nil || t != warm.released {
			warm.close()
			warm = nil
		}
	}
	if warm == nil {
		how = "restored"
		w, err := r.restoreWarm(ctx)
		if err != nil {
			return err
		}
		warm = w
	}
	defer warm.close()
	agg, released, seq := warm.agg, warm.released, warm.seq
	r.logf("aggregator %s: continuing after release %d at log position %d (%s)", r.id, released, seq, how)
	// Releases are stored in order by one goroutine while the log is
	// applied on; the first failure stops leading.
	ctx, cancelLead := context.WithCancelCause(ctx)
	defer cancelLead(nil)
	pipe := &pipeline{jobs: make(chan *checkpointJob, 2)}
	stored := r.storeReleases(ctx, cancelLead, pipe)
	defer func() { <-stored }()
	defer close(pipe.jobs)
	it, msgs, err := r.readLog(ctx, seq)
	if err != nil {
		return err
	}
	defer it.Stop()
	err = r.applyLog(ctx, agg, seq, pipe, msgs)
	if stopped != nil {
		stopped()
	}
	return err
}

// storeReleases stores the releases sent on pipe.jobs in order and
// publishes each decision once its release is stored; the first failure
// cancels leading (later jobs are skipped). The channel returned is closed
// when pipe.jobs is closed and drained.
func (r *replicated) storeReleases(ctx context.Context, cancelLead context.CancelCauseFunc, pipe *pipeline) <-chan struct{} {
	stored := make(chan struct{})
	go func() {
		defer close(stored)
		for j := range pipe.jobs {
			if ctx.Err() != nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := r.store(cctx, j)
			cancel()
			if err != nil {
				cancelLead(err)
				continue
			}
			pipe.pending.Add(-1)
			r.publish([]decision{j.dec})
		}
	}()
	return stored
}

// logMsg is the next message of the log, or the error that ends reading.
type logMsg struct {
	m   jetstream.Msg
	err error
}

// readLog reads the log from position seq+1 on into the channel returned,
// until an error (sent too) or the end of ctx; the caller stops it.
func (r *replicated) readLog(ctx context.Context, seq uint64) (jetstream.MessagesContext, <-chan logMsg, error) {
	cons, err := r.js.OrderedConsumer(ctx, r.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.o.service + ".log.>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1,
	})
	if err != nil {
		return nil, nil, err
	}
	// Short heartbeats: a consumer whose server died is noticed (and the
	// ordered consumer recreated from the next position) within seconds.
	it, err := cons.Messages(jetstream.PullMaxMessages(1024), jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return nil, nil, err
	}
	msgs := make(chan logMsg, 64)
	go func() {
		// Next without a timeout: its heartbeat check runs only while
		// it waits long enough.
		for {
			m, err := it.Next()
			select {
			case msgs <- logMsg{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return it, msgs, nil
}

// applyLog applies the log's messages to agg while ctx lasts, writing the
// ledger and publishing commit ticks as they fall due.
func (r *replicated) applyLog(ctx context.Context, agg *aggregate.Aggregator, seq uint64, pipe *pipeline, msgs <-chan logMsg) error {
	tick := time.NewTicker(aliveEvery)
	defer tick.Stop()
	lastLedger := time.Time{}
	ledgerDirty := false
	nextTick := time.Now().Add(r.o.commitEvery)
	for ctx.Err() == nil {
		var n logMsg
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
			// The heartbeat: the front-ends wait for decisions while
			// they hear it.
			r.publish([]decision{})
		case n = <-msgs:
		}
		switch {
		case n.err != nil:
			return n.err
		case n.m != nil:
			d, err := r.apply(ctx, agg, n.m, &seq, pipe)
			if err != nil {
				return err
			}
			if d != nil {
				r.publish([]decision{*d})
			}
			// A commit's decision is published once its release is
			// stored (d is nil), but the ledger changed all the same.
			ledgerDirty = true
		}
		// The ledger is written when every release made is stored: it
		// never counts a release that cannot be read yet.
		if ledgerDirty && time.Since(lastLedger) > 250*time.Millisecond && pipe.pending.Load() == 0 {
			if err := r.writeLedger(ctx, agg.Ledger()); err != nil {
				return err
			}
			lastLedger, ledgerDirty = time.Now(), false
		}
		if r.o.commitEvery > 0 && time.Now().After(nextTick) {
			r.publishTick(ctx, agg)
			nextTick = time.Now().Add(r.o.commitEvery)
		}
	}
	return context.Cause(ctx)
}

// publishTick asks the log for a commit of the next step. The same id for
// the same step: two aggregators' ticks for one step are de-duplicated by
// the log.
func (r *replicated) publishTick(ctx context.Context, agg *aggregate.Aggregator) {
	next := agg.Ledger().Steps + 1
	if next <= r.o.horizon {
		r.js.PublishMsg(ctx, nats.NewMsg(r.subjCmt), jetstream.WithMsgID("tick:"+strconv.Itoa(next)))
	}
}

// apply applies one log entry and returns the decision to publish (nil
// for an entry already applied).
//
// With async set, a release's snapshot is taken at once but stored by the
// receiver of async, which publishes the commit's decision after storing
// it; apply then returns a nil decision for the commit. Decisions on later
// contributions do not depend on the noise, so they may be published
// before the release is stored: an aggregator that replays the log from
// the stored state decides the same.
func (r *replicated) apply(ctx context.Context, agg *aggregate.Aggregator, m jetstream.Msg, seq *uint64, async *pipeline) (*decision, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	if md.Sequence.Stream <= *seq {
		return nil, nil // delivered again after a consumer reset
	}
	*seq = md.Sequence.Stream
	d := &decision{ID: m.Headers().Get(jetstream.MsgIDHeader), Seq: md.Sequence.Stream}
	switch m.Subject() {
	case r.subjAdd:
		c, vec, derr := decodeEntry(m.Data())
		if derr != nil {
			c, vec = "", nil // rejected by Add below, in log order
		}
		step, err := agg.Add(ctx, c, vec)
		d.Step = step
		var rej *aggregate.RejectError
		switch {
		case errors.As(err, &rej):
			d.Step, d.Detail = rej.Step, rej.Detail
			d.Reason = reasonIndex(rej.Reason)
		case err != nil:
			return nil, err
		}
	case r.subjCmt:
		rel, err := agg.Commit(ctx)
		switch {
		case errors.Is(err, aggregate.ErrBudgetExhausted):
			d.Reason, d.Detail = reasonIndex(aggregate.ErrBudgetExhausted), err.Error()
		case err != nil:
			return nil, err
		default:
			d.Step = rel.Step
			if async != nil {
				j, err := r.prepare(agg, rel, *seq)
				if err != nil {
					return nil, err
				}
				j.dec = *d
				async.pending.Add(1)
				select {
				case async.jobs <- j:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return nil, nil
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := r.checkpoint(cctx, agg, rel, *seq)
			cancel()
			if err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

func reasonIndex(err error) int {
	for i, e := range rejectReasons {
		if errors.Is(err, e) {
			return i + 1
		}
	}
	return len(rejectReasons) + 1
}

func (r *replicated) publish(decs []decision) {
	b, _ := json.Marshal(decs)
	r.nc.Publish(r.subjDec, b) // best effort: a front-end that misses it answers 202
}

// checkpoint stores release rel with the snapshot after it and the log
// position seq it covers. Creating rel.<t> is the single point of
// decision: if the key exists another aggregator made release t first.
func (r *replicated) checkpoint(ctx context.Context, agg *aggregate.Aggregator, rel *aggregate.Release, seq uint64) error {
	j, err := r.prepare(agg, rel, seq)
	if err != nil {
		return err
	}
	return r.store(ctx, j)
}

// pipeline carries releases from the log's applier to the goroutine that
// stores them in order.
type pipeline struct {
	jobs    chan *checkpointJob
	pending atomic.Int64 // releases made and not stored yet
}

// checkpointJob is a release with the snapshot taken right after it, to
// store.
type checkpointJob struct {
	rel  *aggregate.Release
	snap []byte
	rec  releaseRecord
	dec  decision
}

// prepare takes the snapshot after release rel (synchronously: the engine
// moves on afterwards).
func (r *replicated) prepare(agg *aggregate.Aggregator, rel *aggregate.Release, seq uint64) (*checkpointJob, error) {
	// The store file holds the mechanism's factorization (dense, and
	// mostly structure) and free pages: gzip at its fastest makes it a
	// fraction of its size.
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := agg.Snapshot(zw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	h := sha256.Sum256(buf.Bytes())
	// One name per attempt: a record whose write landed unseen may name
	// an earlier attempt's snapshot, which a retry must neither
	// overwrite nor delete.
	var nonce [6]byte
	rand.Read(nonce[:])
	name := fmt.Sprintf("snap.%d.%s.%x", rel.Step, r.id, nonce)
	return &checkpointJob{rel: rel, snap: buf.Bytes(), rec: releaseRecord{Step: rel.Step, Seq: seq, Sum: rel.Sum,
		HasCount: rel.HasCount, Count: rel.Count, Snapshot: name, SnapSHA: hex.EncodeToString(h[:]), Ledger: agg.Ledger(), Leader: r.id}}, nil
}

// store writes the snapshot, then creates the release record.
func (r *replicated) store(ctx context.Context, j *checkpointJob) error {
	rel, name := j.rel, j.rec.Snapshot
	if _, err := r.snaps.PutBytes(ctx, name, j.snap); err != nil {
		return fmt.Errorf("snapshot %s: %w", name, err)
	}
	b, err := json.Marshal(j.rec)
	if err != nil {
		return err
	}
	if _, err := r.state.Create(ctx, relKey(rel.Step), b); err != nil {
		if err := r.createFailed(ctx, rel.Step, name, err); err != nil {
			return err
		}
	}
	// The head only moves forward (expected revision); a reader also
	// probes past it, so a head left behind is harmless.
	r.advanceHead(ctx, rel.Step)
	// Snapshots older than the previous release are no longer needed.
	if old := rel.Step - 2; old >= 1 {
		if orec, _, err := r.record(ctx, old); err == nil {
			r.snaps.Delete(ctx, orec.Snapshot)
		}
	}
	return nil
}

// createFailed settles a failed Create of release t's record, which
// named the snapshot name: nil when the record stored names it (the
// write landed and only its reply was lost), errDeposed when it names
// another (the snapshot, never referenced, is deleted), and otherwise the
// error, keeping the snapshot: the write may still land, and a record
// must never name a deleted snapshot (every later leader would fail to
// restore from it).
func (r *replicated) createFailed(ctx context.Context, t int, name string, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rec, _, rerr := r.record(rctx, t)
	switch {
	case rerr == nil && rec.Snapshot == name:
		return nil
	case rerr == nil || errors.Is(err, jetstream.ErrKeyExists):
		r.snaps.Delete(rctx, name)
		return fmt.Errorf("release %d: %w", t, errDeposed)
	default:
		// Unknown whether it was written: start again from the stored
		// state.
		return fmt.Errorf("release %d: %w", t, err)
	}
}

func (r *replicated) advanceHead(ctx context.Context, t int) {
	v := []byte(strconv.Itoa(t))
	for range 5 {
		e, err := r.stateGet(ctx, "head")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			_, err = r.state.Create(ctx, "head", v)
		} else if err == nil {
			if h, _ := strconv.Atoi(string(e.value)); h >= t {
				return
			}
			_, err = r.state.Update(ctx, "head", v, e.rev)
		}
		if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
			return
		}
	}
}

// writeLedger stores the ledger unless a stored one has more steps
// (compare and update with the expected revision).
func (r *replicated) writeLedger(ctx context.Context, l aggregate.Ledger) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	for range 5 {
		e, err := r.stateGet(ctx, "ledger")
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = r.state.Create(ctx, "ledger", b)
		case err == nil:
			var old aggregate.Ledger
			if json.Unmarshal(e.value, &old) == nil && old.Steps > l.Steps {
				return nil
			}
			_, err = r.state.Update(ctx, "ledger", b, e.rev)
		}
		if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
			return nil // best effort: the next batch writes it again
		}
	}
	return nil
}

// serveReplicated is serve for -nats.
func serveReplicated(ctx context.Context, o options, tlsCfg *tls.Config, acc access, stdout, stderr io.Writer) error {
	if err := checkRelease(ctx, &o); err != nil {
		return err
	}
	ln, err := listener(o, tlsCfg != nil, acc.key != nil)
	if err != nil {
		return err
	}
	defer ln.Close()
	r, err := dialReplicated(ctx, o)
	if err != nil {
		return err
	}
	defer r.close()
	r.logf = func(format string, args ...any) { fmt.Fprintf(stderr, "dpserve: "+format+"\n", args...) }
	actx, stopAgg := context.WithCancel(ctx)
	aggDone := make(chan struct{})
	if o.aggregator {
		go func() { defer close(aggDone); r.runAggregator(actx) }()
	} else {
		close(aggDone)
	}
	hc := handlerConfig{maxBody: o.maxBody, inflight: o.inflight, access: acc, config: map[string]any{
		"addr": ln.Addr().String(), "tls": tlsCfg != nil, "credentials": acc.key != nil,
		"rate_per_contributor": o.rate, "burst": o.burst, "nats": natsconn.Redact(o.nats), "service": o.service, "replicas": o.replicas,
		"aggregator": o.aggregator, "lease_ttl_seconds": o.leaseTTL.Seconds(), "dim": o.dim, "mechanism": o.mechanism,
		"workload": o.workload, "horizon": o.horizon, "epsilon": o.epsilon, "delta": o.delta, "clip": o.clip,
		"k": o.k, "b": o.b, "count": o.count, "seeded": o.seed != "", "commit_every_seconds": o.commitEvery.Seconds(),
		"max_body": o.maxBody, "max_inflight": o.inflight, "noise_memory": o.noiseMemory,
		"version": buildinfo.Read().String(),
	}}
	srv := &http.Server{Handler: newHandler(r, hc), TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
	srv.ErrorLog = connLog()
	if o.seed != "" {
		fmt.Fprintln(stderr, "dpserve: WARNING: -seed fixes the noise; releases are not private (tests only)")
	}
	if acc.key == nil {
		fmt.Fprintln(stderr, "dpserve: no -auth-key: every caller that reaches this loopback port acts as the operator")
	}
	fmt.Fprintf(stdout, "dpserve: listening on %s (replicated: %s, service %s)\n", ln.Addr(), natsconn.Redact(o.nats), o.service)
	errc := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		stopAgg()
		<-aggDone
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// The aggregator stops first and gives its lease up (runAggregator),
	// so that a standby takes over while this front-end finishes the
	// requests it has: those waiting for a decision get it from the new
	// leader, or 202 (logged) once no leader is heard.
	stopAgg()
	<-aggDone
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(stdout, "dpserve: stopped")
	return nil
}
