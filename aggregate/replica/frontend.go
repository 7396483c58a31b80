package replica

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrUnavailable is matched by the error of a request the cluster did not
// answer in time (the log did not confirm it, or the state could not be
// read): retry it, with the same idempotency key for a contribution.
var ErrUnavailable = errors.New("replica: the cluster did not answer")

// unavailableError is an error matching ErrUnavailable whose message is
// msg.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }
func (e *unavailableError) Unwrap() error { return ErrUnavailable }

func unavailable(format string, args ...any) error {
	return &unavailableError{fmt.Sprintf(format, args...)}
}

// LoggedError is Add's answer when the log holds the contribution but the
// aggregator's decision did not arrive in time (or no aggregator leads
// now, or the request was a retry of a logged one): the contribution is
// durable and is applied in log order.
type LoggedError struct {
	// Sequence is the contribution's position in the log.
	Sequence uint64
}

func (e *LoggedError) Error() string {
	return fmt.Sprintf("contribution logged at sequence %d", e.Sequence)
}

// idempotencyKey is the context key of a request's idempotency key.
type idempotencyKey struct{}

// WithIdempotencyKey returns ctx carrying key: Add and Commit called with
// it log the request under an id made of the kind, the contributor and
// key, so that a retry with the same key is counted once (within 10
// minutes). Without a key every request is a new one.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, idempotencyKey{}, key)
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

func reasonIndex(err error) int {
	for i, e := range rejectReasons {
		if errors.Is(err, e) {
			return i + 1
		}
	}
	return len(rejectReasons) + 1
}

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

func (r *Node) onDecisions(m *nats.Msg) {
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

func (r *Node) wait(id string) chan decision {
	ch := make(chan decision, 1)
	r.mu.Lock()
	r.waiters[id] = ch
	r.mu.Unlock()
	return ch
}

func (r *Node) unwait(id string) {
	r.mu.Lock()
	delete(r.waiters, id)
	r.mu.Unlock()
}

// msgID is the log's de-duplication id (Nats-Msg-Id) of a request: with
// an idempotency key, one id per kind, contributor and key, so that a
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

// keyedID is the id of a request with an idempotency key: distinct for
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
func (r *Node) Dim() int { return r.cfg.Aggregate.Dim }

// Add validates the contribution as the aggregator does
// (aggregate.CheckContribution), publishes it to the log and returns its
// step once the aggregator decided, or its rejection (a
// *aggregate.RejectError). It returns a *LoggedError when the decision
// did not arrive within Config.DecisionWait, at once when no leading
// aggregator is heard, and for a retry of a logged contribution (the
// same idempotency key); an error matching ErrUnavailable when the log
// did not confirm it.
func (r *Node) Add(ctx context.Context, contributor string, vec []float64) (int, error) {
	if err := aggregate.CheckContribution(contributor, vec, r.Dim()); err != nil {
		return 0, err
	}
	id := msgID(ctx, "add", contributor)
	ch := r.wait(id)
	defer r.unwait(id)
	m := nats.NewMsg(r.subjAdd)
	m.Data = encodeEntry(contributor, vec)
	ack, err := r.js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
	if err != nil {
		return 0, unavailable("the replicated log did not confirm the contribution; retry with the same Idempotency-Key header: %v", err)
	}
	if ack.Duplicate {
		// A retry of a logged contribution: counted once, decided before.
		return 0, &LoggedError{Sequence: ack.Sequence}
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
			return 0, &LoggedError{Sequence: ack.Sequence}
		case <-ctx.Done():
			return 0, &LoggedError{Sequence: ack.Sequence}
		case <-check.C:
		}
	}
	// No leader applies the log now: the contribution is durable in it
	// and will be decided once one does; answering at once keeps the
	// front-end's capacity for the requests that follow.
	select {
	case d := <-ch:
		return d.Step, d.err(contributor)
	default:
	}
	return 0, &LoggedError{Sequence: ack.Sequence}
}

// aliveEvery is the leading aggregator's heartbeat period: while it
// applies the log it publishes an empty decision batch at least this
// often.
const aliveEvery = 100 * time.Millisecond

// leaderSilent reports whether no leading aggregator was heard from
// within aliveWindow.
func (r *Node) leaderSilent() bool {
	return r.aliveWindow > 0 && time.Since(time.Unix(0, r.lastAlive.Load())) > r.aliveWindow
}

// Commit logs a commit and returns the release the aggregator made for
// it; an error matching ErrUnavailable when the log did not confirm it or
// no aggregator applied it within 30 s.
func (r *Node) Commit(ctx context.Context) (*aggregate.Release, error) {
	id := msgID(ctx, "commit", "")
	ch := r.wait(id)
	defer r.unwait(id)
	ack, err := r.js.PublishMsg(ctx, nats.NewMsg(r.subjCmt), jetstream.WithMsgID(id))
	if err != nil {
		return nil, unavailable("the replicated log did not confirm the commit: %v", err)
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
	return nil, unavailable("the commit is in the log at sequence %d but no aggregator applied it yet (is one holding the lease?)", ack.Sequence)
}

func (r *Node) record(ctx context.Context, t int) (*releaseRecord, uint64, error) {
	e, err := r.stateGet(ctx, relKey(t))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("aggregate: %w: step %d", aggregate.ErrNotReleased, t)
	}
	if err != nil {
		return nil, 0, unavailable("reading release %d: %v", t, err)
	}
	var rec releaseRecord
	if err := json.Unmarshal(e.value, &rec); err != nil || rec.Step != t || len(rec.Sum) != r.Dim() {
		return nil, 0, fmt.Errorf("release record %d: corrupt (%v)", t, err)
	}
	return &rec, e.rev, nil
}

// Release returns release t from the replicated state.
func (r *Node) Release(t int) (*aggregate.Release, error) {
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
func (r *Node) Ledger() aggregate.Ledger {
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
	a := &r.cfg.Aggregate
	return aggregate.Ledger{EpsilonBudget: a.Epsilon, EpsilonRemaining: a.Epsilon, Delta: a.Delta, Horizon: r.cfg.horizon(),
		Clip: a.Clip, Covered: a.Seed == nil, Assumptions: []string{"no aggregator has written the ledger yet (none elected, or no contribution applied)"}}
}

// head is the last release made: the head key, then any release created
// after it (an aggregator that stopped between the two writes).
func (r *Node) head(ctx context.Context) (int, error) {
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
