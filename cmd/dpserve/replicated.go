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
//   - A standby that takes the lease reads the last release record,
//     restores its snapshot and replays the log after the position it
//     covers: it continues with the noise state stored with the last
//     release, never drawing a step's noise again for publication nor
//     reusing it.
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

	"github.com/dpmf-go/dpmf/internal/natsconn"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/internal/buildinfo"
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

	mu      sync.Mutex
	waiters map[string]chan decision
	ledger  aggregate.Ledger // the ledger last served, for monotonicity

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
		subjDec: o.service + ".decided", decisionWait: 2 * time.Second, waiters: map[string]chan decision{},
		logf: func(string, ...any) {},
	}
	opts := []nats.Option{nats.Name("dpserve " + r.id), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second)}
	opts = append(opts, natsconn.Security{Creds: o.natsCreds, CA: o.natsCA, Cert: o.natsCert, Key: o.natsKey}.Options()...)
	nc, err := nats.Connect(o.nats, opts...)
	if err != nil {
		return nil, usagef("-nats %s: %v", o.nats, err)
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

// msgID is the log's de-duplication id of a request: the request's
// Idempotency-Key within the contributor's namespace (a contributor
// cannot suppress another's contribution), or a fresh random id.
func msgID(ctx context.Context, kind, contributor string) string {
	if k, ok := ctx.Value(idempotencyKey{}).(string); ok && k != "" {
		return kind + ":" + contributor + ":" + k
	}
	b := make([]byte, 16)
	rand.Read(b)
	return kind + ":" + hex.EncodeToString(b)
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
	select {
	case d := <-ch:
		return d.Step, d.err(contributor)
	case <-t.C:
	case <-ctx.Done():
	}
	return 0, &loggedError{seq: ack.Sequence}
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
	return &aggregate.Release{Step: rec.Step, Sum: rec.Sum, HasCount: rec.HasCount, Count: rec.Count}, nil
}

// Ledger is the ledger the aggregator last wrote (steps never decrease).
func (r *replicated) Ledger() aggregate.Ledger {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var l aggregate.Ledger
	e, err := r.stateGet(ctx, "ledger")
	if err == nil && json.Unmarshal(e.value, &l) == nil {
		// A ledger written by an aggregator replaying the log may be
		// older than one this front-end served: never serve fewer steps
		// than before.
		r.mu.Lock()
		defer r.mu.Unlock()
		if l.Steps < r.ledger.Steps {
			return r.ledger
		}
		r.ledger = l
		return l
	}
	r.mu.Lock()
	defer r.mu.Unlock()
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
// holds it.
func (r *replicated) runAggregator(ctx context.Context) {
	for ctx.Err() == nil {
		rev, err := r.lease.Create(ctx, "leader", []byte(r.id))
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(r.o.leaseTTL / 5):
			}
			continue
		}
		r.logf("aggregator %s: lease won", r.id)
		lctx, cancel := context.WithCancel(ctx)
		go r.renew(lctx, cancel, rev)
		err = r.lead(lctx)
		cancel()
		if ctx.Err() == nil {
			// Not stopped from outside: give the lease up so that a
			// standby (or this process) leads again without waiting
			// for it to expire.
			r.logf("aggregator %s: stopped leading: %v", r.id, err)
			dctx, dcancel := context.WithTimeout(ctx, r.o.leaseTTL)
			r.releaseLease(dctx)
			dcancel()
			time.Sleep(r.o.leaseTTL / 10)
		}
	}
}

// renew keeps the lease; when an Update with the expected revision fails
// (another holder, or the cluster unreachable for long) leading stops.
func (r *replicated) renew(ctx context.Context, stop context.CancelFunc, rev uint64) {
	defer stop()
	tick := time.NewTicker(r.o.leaseTTL / 4)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		uctx, cancel := context.WithTimeout(ctx, r.o.leaseTTL/4)
		nrev, err := r.lease.Update(uctx, "leader", []byte(r.id), rev)
		cancel()
		switch {
		case err == nil:
			rev, last = nrev, time.Now()
		case errors.Is(err, jetstream.ErrKeyExists) || time.Since(last) > r.o.leaseTTL/2:
			// Someone else holds it, or it may have expired: a standby
			// may lead now.
			return
		}
	}
}

// releaseLease gives the lease up (a clean shutdown), so a standby takes
// over at once.
func (r *replicated) releaseLease(ctx context.Context) {
	e, err := r.lease.Get(ctx, "leader")
	if err == nil && string(e.Value()) == r.id {
		r.lease.Delete(ctx, "leader", jetstream.LastRevision(e.Revision()))
	}
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

// lead applies the log in order while ctx lasts.
func (r *replicated) lead(ctx context.Context) error {
	dir, err := os.MkdirTemp(r.o.workDir, "dpserve-aggregator-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	agg, released, seq, err := r.restore(ctx, dir)
	if err != nil {
		return err
	}
	defer agg.Close()
	r.logf("aggregator %s: continuing after release %d (log position %d)", r.id, released, seq)
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
	return r.applyLog(ctx, agg, seq, pipe, msgs)
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
	tick := time.NewTicker(100 * time.Millisecond)
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
				ledgerDirty = true
			}
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
	if len(decs) == 0 {
		return
	}
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
		"rate_per_contributor": o.rate, "burst": o.burst, "nats": o.nats, "service": o.service, "replicas": o.replicas,
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
	fmt.Fprintf(stdout, "dpserve: listening on %s (replicated: %s, service %s)\n", ln.Addr(), o.nats, o.service)
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
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	stopAgg()
	<-aggDone
	r.releaseLease(sctx)
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(stdout, "dpserve: stopped")
	return nil
}
