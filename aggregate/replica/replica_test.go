package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/internal/natstest"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestReplicatedFencing: two aggregators that both believe they lead
// (one deposed but still running) apply the same log from the same
// stored state with their own CSPRNG noise: their releases for step 1
// differ, and only the first is stored; the second learns it is deposed
// and the stored release stays the first one's.
func TestReplicatedFencing(t *testing.T) {
	url := natstest.StartJetStream(t)
	cfg := testConfig(t)
	cfg.Replicas, cfg.Aggregate.Seed = 1, nil
	var rs []*Node
	for range 2 {
		r := dial(t, url, cfg)
		r.decisionWait = time.Millisecond
		rs = append(rs, r)
	}
	ctx := context.Background()
	for i := range 3 {
		if _, err := rs[0].Add(ctx, fmt.Sprintf("c%d", i), []float64{0.5, 0.5}); err == nil {
			t.Fatal("Add returned a step with no aggregator running")
		}
	}
	if _, err := rs[0].js.PublishMsg(ctx, nats.NewMsg(rs[0].subjCmt), jetstream.WithMsgID("commit:1")); err != nil {
		t.Fatal(err)
	}
	var sums [][]float64
	var errs []error
	// Both restore the state before release 1, then both apply the log.
	var aggs []*aggregate.Aggregator
	for _, r := range rs {
		agg, released, seq, err := r.restore(ctx, t.TempDir())
		if err != nil || released != 0 || seq != 0 {
			t.Fatalf("restore: %v (%d releases, position %d)", err, released, seq)
		}
		defer agg.Close()
		aggs = append(aggs, agg)
	}
	for i, r := range rs {
		agg, seq := aggs[i], uint64(0)
		cons, err := r.js.OrderedConsumer(ctx, r.stream, jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := cons.Fetch(4, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var last error
		for m := range b.Messages() {
			if _, err := r.apply(ctx, agg, m, &seq, nil); err != nil {
				last = err
			}
		}
		errs = append(errs, last)
		rel, err := agg.Release(1)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, rel.Sum)
	}
	if errs[0] != nil || !errors.Is(errs[1], errDeposed) {
		t.Fatalf("first aggregator: %v; second: %v (want %v)", errs[0], errs[1], errDeposed)
	}
	if slices.Equal(sums[0], sums[1]) {
		t.Fatal("two aggregators drew the same noise: the test cannot tell their releases apart")
	}
	stored, err := rs[1].Release(1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored.Sum, sums[0]) {
		t.Fatalf("stored release 1 %v, first aggregator's %v", stored.Sum, sums[0])
	}
	if l := rs[1].Ledger(); l.Steps != 0 && l.Steps != 1 {
		t.Fatalf("ledger steps %d", l.Steps)
	}
}

// lostReplyKV is a state bucket whose Create of a release record is
// applied by the server but answered with a timeout, as when a NATS node
// dies between applying a write and replying.
type lostReplyKV struct {
	jetstream.KeyValue
	lost *atomic.Int64
}

func (k lostReplyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := k.KeyValue.Create(ctx, key, value, opts...)
	if err == nil && strings.HasPrefix(key, "rel.") {
		k.lost.Add(1)
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

// A release record whose write was applied but whose reply was lost still
// names a snapshot that exists: the aggregator reads the record back and
// finds its own snapshot named, instead of deleting the snapshot on an
// error, so the next leader restores the state after that release
// (TestReplicatedFailover hit this as "snapshot snap.18...: object not
// found", with every later leader stuck). A rival attempt at the same
// release is deposed without touching the stored snapshot, and an unknown
// outcome with no record keeps its snapshot.
func TestReplicatedLostReplyKeepsSnapshot(t *testing.T) {
	cfg := testConfig(t)
	cfg.Replicas = 1
	r := dial(t, natstest.StartJetStream(t), cfg)
	r.decisionWait = time.Millisecond
	var lost atomic.Int64
	r.state = lostReplyKV{r.state, &lost}
	ctx := context.Background()
	for i := range 3 {
		if _, err := r.Add(ctx, fmt.Sprintf("c%d", i), []float64{0.5, 0.5}); err == nil {
			t.Fatal("Add returned a step with no aggregator running")
		}
	}
	if _, err := r.js.PublishMsg(ctx, nats.NewMsg(r.subjCmt), jetstream.WithMsgID("commit:1")); err != nil {
		t.Fatal(err)
	}
	apply := func() error {
		agg, _, seq, err := r.restore(ctx, t.TempDir())
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		defer agg.Close()
		cons, err := r.js.OrderedConsumer(ctx, r.stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1})
		if err != nil {
			return err
		}
		b, err := cons.Fetch(4, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return err
		}
		var last error
		for m := range b.Messages() {
			if _, err := r.apply(ctx, agg, m, &seq, nil); err != nil {
				last = err
			}
		}
		return last
	}
	// The first leader: its write lands, its reply is lost.
	if err := apply(); err != nil {
		t.Fatalf("the aggregator whose record landed: %v", err)
	}
	if lost.Load() != 1 {
		t.Fatalf("%d replies lost, want 1: the test tests nothing", lost.Load())
	}
	stored, err := r.Release(1)
	if err != nil {
		t.Fatalf("release 1 not stored: %v", err)
	}
	// The next leader restores from release 1.
	agg, released, _, err := r.restore(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("the next leader cannot restore: %v", err)
	}
	agg.Close()
	if released != 1 {
		t.Fatalf("restored after release %d, want 1", released)
	}
	if again, err := r.Release(1); err != nil || !slices.Equal(again.Sum, stored.Sum) {
		t.Fatalf("release 1 changed: %v (%v)", again, err)
	}
	if err := r.createFailed(ctx, 1, "snap.1.rival", jetstream.ErrKeyExists); !errors.Is(err, errDeposed) {
		t.Fatalf("a rival's attempt at release 1: %v, want %v", err, errDeposed)
	}
	if err := r.createFailed(ctx, 2, "snap.2.unknown", context.DeadlineExceeded); err == nil || errors.Is(err, errDeposed) {
		t.Fatalf("an unknown outcome with no record: %v, want the timeout", err)
	}
	if agg, _, _, err := r.restore(ctx, t.TempDir()); err != nil {
		t.Fatalf("after the rival: %v", err)
	} else {
		agg.Close()
	}
	// A leader whose first reads of the snapshot reach a replica that
	// does not hold it yet (catching up after a restart: "object not
	// found" in TestReplicatedFailover) restores once it is there.
	ms := &missingSnaps{ObjectStore: r.snaps}
	ms.misses.Store(3)
	r.snaps = ms
	if agg, _, _, err := r.restore(ctx, t.TempDir()); err != nil {
		t.Fatalf("a snapshot missing from the first 3 reads: %v", err)
	} else {
		agg.Close()
	}
}

// missingSnaps answers the first reads of a snapshot "object not found".
type missingSnaps struct {
	jetstream.ObjectStore
	misses atomic.Int32
}

func (m *missingSnaps) GetBytes(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) ([]byte, error) {
	if m.misses.Add(-1) >= 0 {
		return nil, jetstream.ErrObjectNotFound
	}
	return m.ObjectStore.GetBytes(ctx, name, opts...)
}

// TestStateGetUnanswered: a state read that nobody answers (the stream
// electing its leader) fails after a bounded wait; with no deadline of
// its own it blocked a leader's log loop for good, and no commit
// succeeded again.
func TestStateGetUnanswered(t *testing.T) {
	// A server without JetStream, where a subscriber takes the message
	// get and never answers.
	url := natstest.Start(t, &natsserver.Options{})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	r := &Node{nc: nc, cfg: Config{Service: "dpserve"}}
	done := make(chan error, 1)
	go func() { _, err := r.stateGet(context.Background(), "head"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("an unanswered read: %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("an unanswered state read still waits after 30 s")
	}
}

// TestReplicatedReadsSeeAcknowledgedWrites: on a 3-node cluster where a
// node was just restarted (its replicas catching up), a release record
// and head written and acknowledged are seen at once by the reads a
// front-end and a new leader use (head, Release, Ledger). Direct gets,
// which any replica answers, returned an older head or "no such release"
// for several percent of the reads here; TestReplicatedFailover's
// verification read head 24 after clients had been served release 25.
func TestReplicatedReadsSeeAcknowledgedWrites(t *testing.T) {
	cl := natstest.StartCluster(t, 3)
	cfg := testConfig(t)
	r := dial(t, cl.URLs(), cfg)
	ctx := context.Background()
	rounds := 3
	if testing.Short() {
		rounds = 2
	}
	step, reads, stale := 0, 0, 0
	for round := range rounds {
		cl.Kill(round % 3)
		time.Sleep(300 * time.Millisecond)
		cl.Start(round % 3)
		for t0 := time.Now(); time.Since(t0) < 2*time.Second; {
			next := step + 1
			rec, _ := json.Marshal(releaseRecord{Step: next, Sum: []float64{float64(next), 0},
				Ledger: aggregate.Ledger{Steps: next, Horizon: cfg.horizon()}})
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := r.state.Create(wctx, relKey(next), rec)
			if err == nil || errors.Is(err, jetstream.ErrKeyExists) { // a retry of a write that landed
				l, _ := json.Marshal(aggregate.Ledger{Steps: next, Horizon: cfg.horizon()})
				if _, err = r.state.Put(wctx, "ledger", l); err == nil {
					r.advanceHead(wctx, next) // best effort: head also finds rel.<next>
				}
			}
			cancel()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue // not acknowledged: write it again
			}
			step = next
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			h, herr := r.head(rctx)
			cancel()
			rel, rerr := r.Release(step)
			l := r.Ledger()
			reads++
			if herr != nil || h != step || rerr != nil || rel.Sum[0] != float64(step) || l.Steps != step {
				if stale++; stale <= 5 {
					t.Errorf("round %d: after release %d was acknowledged: head %d (%v), release %v (%v), ledger %d steps",
						round, step, h, herr, rel, rerr, l.Steps)
				}
			}
		}
	}
	t.Logf("%d of %d reads after an acknowledged write missed it (%d rounds of a node restart)", stale, reads, rounds)
}

// stallingJS fails the first requests that create or update a key-value
// bucket or the object store, as JetStream does while it elects a meta or
// stream leader: the last of them gets no reply at all, the others "no
// responders".
type stallingJS struct {
	jetstream.JetStream
	stalls atomic.Int32
}

func (s *stallingJS) stall(ctx context.Context) error {
	switch n := s.stalls.Add(-1); {
	case n < 0:
		return nil
	case n == 0:
		<-ctx.Done() // no reply at all
		return ctx.Err()
	default:
		return nats.ErrNoResponders
	}
}

func (s *stallingJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if err := s.stall(ctx); err != nil {
		return nil, err
	}
	return s.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
}

func (s *stallingJS) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if err := s.stall(ctx); err != nil {
		return nil, err
	}
	return s.JetStream.CreateOrUpdateObjectStore(ctx, cfg)
}

// TestReplicatedSetupRetries: a node that starts while requests to
// JetStream go unanswered retries each step of its setup (a new standby
// started during a failover failed with "lease bucket: context deadline
// exceeded" and exited), and a node whose release-determining flags
// differ from the cluster's is refused at once, naming both.
func TestReplicatedSetupRetries(t *testing.T) {
	url := natstest.StartJetStream(t)
	cfg := testConfig(t)
	cfg.Replicas = 1
	r := dial(t, url, cfg)
	sj := &stallingJS{JetStream: r.js}
	sj.stalls.Store(3)
	r.js = sj
	t0 := time.Now()
	if err := r.setup(context.Background()); err != nil {
		t.Fatalf("setup with 3 failed requests: %v", err)
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Errorf("setup took %v", d)
	}

	cfg2 := cfg
	cfg2.Aggregate.Epsilon = 2
	t0 = time.Now()
	nc := connect(t, url)
	defer nc.Close()
	_, err := New(context.Background(), nc, cfg2)
	if !errors.Is(err, aggregate.ErrStoreMismatch) || !strings.Contains(err.Error(), `"epsilon":1`) || !strings.Contains(err.Error(), `"epsilon":2`) {
		t.Fatalf("a node with -epsilon 2 on a cluster with 1: %v", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("the mismatch took %v to report", d)
	}
}

// TestMsgIDUnambiguous: distinct (kind, contributor, Idempotency-Key)
// give distinct de-duplication ids, printable ASCII only, among them the
// pair that collided (contributor a with key b:retry-1, contributor a:b
// with key retry-1: both were add:a:b:retry-1); an id whose old form was
// unambiguous is unchanged (a retry across an upgrade is still counted
// once).
func TestMsgIDUnambiguous(t *testing.T) {
	id := func(kind, c, k string) string {
		return msgID(WithIdempotencyKey(context.Background(), k), kind, c)
	}
	if a, b := id("add", "a", "b:retry-1"), id("add", "a:b", "retry-1"); a == b {
		t.Fatalf("contributor a key b:retry-1 and contributor a:b key retry-1 share the id %q", a)
	}
	if got := id("add", "u1", "k:2"); got != "add:u1:k:2" {
		t.Errorf("id of u1 with key k:2 is %q, want the old form add:u1:k:2", got)
	}
	parts := []string{"a", "b", ":", "a:b", "b:", ":b", "#", "a#", "x y", " x", "x ", "a\nb", "a b", "é", "\x00", "1", "2", "1:2", "1#2"}
	seen := map[string][3]string{}
	for _, kind := range []string{"add", "commit"} {
		for _, c := range append(parts, "") {
			for _, k := range parts {
				got := id(kind, c, k)
				if prev, ok := seen[got]; ok {
					t.Fatalf("%q and %q share the id %q", prev, [3]string{kind, c, k}, got)
				}
				seen[got] = [3]string{kind, c, k}
				if !printable(got) || strings.Count(got, ":") < 1 && !strings.Contains(got, "#") {
					t.Fatalf("id %q of %q", got, [3]string{kind, c, k})
				}
			}
		}
	}
	// Random ids (no key) have one ':', keyed ones more or a '#'.
	if r := msgID(context.Background(), "add", "a:b"); strings.Count(r, ":") != 1 || len(r) != len("add:")+32 {
		t.Errorf("random id %q", r)
	}
}

// TestReplicatedIdempotencyKeyPerContributor: contributor a with the key
// b:retry-1 and contributor a:b with the key retry-1 are two
// contributions, each counted (the second was taken for a retry of the
// first and never counted).
func TestReplicatedIdempotencyKeyPerContributor(t *testing.T) {
	r := leadingNode(t)
	withKey := func(k string) context.Context {
		return WithIdempotencyKey(context.Background(), k)
	}
	for _, c := range []struct{ contributor, key string }{{"a", "b:retry-1"}, {"a:b", "retry-1"}} {
		if step, err := r.Add(withKey(c.key), c.contributor, []float64{0.5, 0.5}); err != nil || step != 1 {
			t.Fatalf("contributor %q key %q: step %d, %v", c.contributor, c.key, step, err)
		}
	}
	if _, err := r.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l := r.Ledger(); l.ContributionsAccepted != 2 {
		t.Fatalf("ledger counts %d contributions, want 2", l.ContributionsAccepted)
	}
}

// leadingNode is a front-end of a service on a JetStream server of its
// own whose aggregator leads, waiting for its decisions as long as
// needed.
func leadingNode(t *testing.T) *Node {
	t.Helper()
	url := natstest.StartJetStream(t)
	cfg := testConfig(t)
	cfg.Replicas = 1
	r := dial(t, url, cfg)
	a := startAggregator(t, url, cfg)
	t.Cleanup(a.kill)
	r.decisionWait, r.aliveWindow = time.Minute, 0
	for {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := r.lease.Get(lctx, "leader")
		cancel()
		if err == nil {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplicatedContract: a node answers like the single-node aggregator
// (the step, a rejection for a wrong dimension and past k, the commit's
// release served again by Release), and a retry with the same
// idempotency key is counted once (without de-duplication the retry
// would be a second participation: rejected, and two contributions in
// the ledger). cmd/dpserve answers these 200, 202, 409 and 400.
func TestReplicatedContract(t *testing.T) {
	r := leadingNode(t)
	ctx := context.Background()
	if _, err := r.Add(ctx, "u0", []float64{0.5, 0.5}); err != nil {
		t.Fatalf("contribution: %v", err)
	}
	var logged *LoggedError
	for _, c := range []struct {
		contributor, key string
		vec              []float64
		step             int
		ok               func(error) bool
	}{
		{"u1", "a", []float64{0.3, 0.4}, 1, func(err error) bool { return err == nil }},
		{"u1", "a", []float64{0.3, 0.4}, 0, func(err error) bool { return errors.As(err, &logged) }}, // the retry: logged once, already decided
		{"u1", "b", []float64{0.3, 0.4}, 1, func(err error) bool { return errors.Is(err, aggregate.ErrParticipationLimit) }},
		{"u2", "", []float64{0.3}, 0, func(err error) bool { return errors.Is(err, aggregate.ErrDimension) }},
	} {
		step, err := r.Add(WithIdempotencyKey(ctx, c.key), c.contributor, c.vec)
		if step != c.step || !c.ok(err) {
			t.Errorf("%s %v (key %q): step %d, %v", c.contributor, c.vec, c.key, step, err)
		}
	}
	rel, err := r.Commit(ctx)
	if err != nil || rel.Step != 1 {
		t.Fatalf("commit: %v %v", rel, err)
	}
	again, err := r.Release(1)
	if err != nil || !slices.Equal(again.Sum, rel.Sum) || again.Count != rel.Count || !again.HasCount {
		t.Fatalf("release 1: %+v (%v); the commit returned %+v", again, err, rel)
	}
	// The ledger counts u0 and u1 once each, and the rejection.
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := r.Ledger()
		if l.Steps == 1 && l.ContributionsAccepted == 2 && l.ContributionsRejected == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger: %d steps, %d accepted, %d rejected; want 1, 2, 1", l.Steps, l.ContributionsAccepted, l.ContributionsRejected)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReplicatedLedgerCoversReleases: right after each commit returned
// its release, and still after the service has been quiet for a while,
// the ledger a front-end serves counts every release made, and every
// release it counts is served (cmd/dpserve's GET /v1/ledger, /healthz
// and /v1/releases read these). (The aggregator wrote the ledger only
// when a later contribution arrived: after four quiet commits the ledger
// stayed at the first release for good, under-reporting the epsilon
// spent.)
func TestReplicatedLedgerCoversReleases(t *testing.T) {
	r := leadingNode(t)
	ctx := context.Background()
	if _, err := r.Add(ctx, "u0", []float64{0.5, 0.5}); err != nil {
		t.Fatal(err)
	}
	check := func(want int) {
		t.Helper()
		l := r.Ledger()
		if l.Steps != want {
			t.Fatalf("%d releases made; ledger %d steps (epsilon spent %g)", want, l.Steps, l.EpsilonSpent)
		}
		for s := 1; s <= want; s++ {
			if _, err := r.Release(s); err != nil {
				t.Fatalf("%d releases made; release %d: %v", want, s, err)
			}
		}
		if want > 0 && !(l.EpsilonSpent > 0) {
			t.Fatalf("ledger after %d releases spends epsilon %g", want, l.EpsilonSpent)
		}
	}
	for s := 1; s <= 4; s++ {
		rel, err := r.Commit(ctx)
		if err != nil || rel.Step != s {
			t.Fatalf("commit %d: %v %v", s, rel, err)
		}
		check(s)
	}
	time.Sleep(time.Second)
	check(4)
}

// TestStoredConfigurationOfDpserve: the configuration a node keeps on
// the cluster is, byte for byte, the one dpserve wrote from its flags
// before replication became a package (-dim 2 -mechanism tree-online
// -workload prefix -horizon 1024 -epsilon 1 -delta 1e-6 -clip 1 -k 1 -b 1
// -count, with and without the test seed, -noise-memory's default): a
// node of this release joins a cluster started by one of the last, and
// a NoiseMemory of 0 (the default) is the same configuration.
func TestStoredConfigurationOfDpserve(t *testing.T) {
	for _, c := range []struct {
		seeded bool
		want   string
	}{
		{true, `{"b":1,"clip":1,"count":true,"delta":0.000001,"dim":2,"epsilon":1,"horizon":1024,"k":1,"mechanism":"tree-online","noise_memory":1073741824,"seed_sha256":"2a8abfa8cb9906290437854193ca6bca41d4d4e26d1d454bd66a35158095e737","workload":"prefix"}`},
		{false, `{"b":1,"clip":1,"count":true,"delta":0.000001,"dim":2,"epsilon":1,"horizon":1024,"k":1,"mechanism":"tree-online","noise_memory":1073741824,"seed_sha256":"","workload":"prefix"}`},
	} {
		cfg := Config{Aggregate: testAggregate(t, 2, 1024, true, c.seeded)}
		if got := string(cfg.fingerprint()); got != c.want {
			t.Errorf("seeded %v: %s\nwant %s", c.seeded, got, c.want)
		}
		cfg.Aggregate.NoiseMemory = 0
		if got := string(cfg.fingerprint()); got != c.want {
			t.Errorf("seeded %v, noise memory 0: %s\nwant %s", c.seeded, got, c.want)
		}
	}
}

// TestAddChecksAsTheAggregator: a front-end refuses what the aggregator
// refuses whatever its state, with the aggregator's own reason and
// detail, before anything reaches the log (the log stays empty).
func TestAddChecksAsTheAggregator(t *testing.T) {
	url := natstest.StartJetStream(t)
	cfg := testConfig(t)
	cfg.Replicas = 1
	r := dial(t, url, cfg)
	agg, err := aggregate.Open(context.Background(), t.TempDir()+"/s.db", cfg.Aggregate)
	if err != nil {
		t.Fatal(err)
	}
	defer agg.Close()
	ctx := context.Background()
	for _, c := range []struct {
		contributor string
		vec         []float64
	}{
		{"", []float64{0, 0}},
		{strings.Repeat("x", aggregate.MaxContributorLen+1), []float64{0, 0}},
		{"u", []float64{0}},
		{"u", []float64{0, 0, 0}},
		{"u", nil},
		{"u", []float64{math.NaN(), 0}},
		{"u", []float64{0, math.Inf(-1)}},
	} {
		_, want := agg.Add(ctx, c.contributor, c.vec)
		_, got := r.Add(ctx, c.contributor, c.vec)
		if want == nil || got == nil || got.Error() != want.Error() || !errors.Is(got, aggregate.ErrRejected) {
			t.Errorf("%q %v: front-end %v, aggregator %v", c.contributor, c.vec, got, want)
		}
	}
	st, err := r.js.Stream(ctx, r.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("the log holds %d entries, want none", info.State.Msgs)
	}
}

// TestNewRefusesConfig: a configuration that cannot run is refused by
// New before it uses the connection (none here), as dpcore.ErrInvalid or
// the planner's refusal: a bad service name, replicas or lease, and an
// engine aggregate.Open would refuse (a clip norm whose noise is not
// finite), which an aggregator would otherwise meet each time it won the
// lease.
func TestNewRefusesConfig(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"service", func(c *Config) { c.Service = "a.b" }, "service"},
		{"replicas", func(c *Config) { c.Replicas = MaxReplicas + 1 }, "replicas"},
		{"lease", func(c *Config) { c.LeaseTTL = MinLeaseTTL / 2 }, "lease"},
		{"clip", func(c *Config) { c.Aggregate.Clip = 1e308 }, "clip norm"},
	} {
		cfg := testConfig(t)
		c.change(&cfg)
		_, err := New(context.Background(), nil, cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming the %s", c.name, err, c.want)
		}
	}
}
