package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// TestReplicatedFailover runs the service on a 3-node JetStream cluster
// (replicas 3) with 2 front-ends and 2 aggregators (one leads, one
// stands by) under load from 4 clients that retry failures with the same
// idempotency key, while the leading aggregator and one NATS node are
// killed at random moments (a new standby is started after each kill and
// the node restarted). Afterwards, with the seeded noise removed from the
// releases: every contribution in the log, which includes every
// acknowledged one, is counted exactly once and in the step whose log
// range holds it; each log id appears once; every release a client saw
// during the run equals the stored one; the log positions of the releases
// increase; the ledger a front-end served never decreased; and after each
// kill a commit succeeded again within the stated bound.
func TestReplicatedFailover(t *testing.T) {
	rounds, clients := 2, 3
	if !testing.Short() {
		rounds, clients = 8, 4
	}
	const resumeBound = 60 * time.Second // stated in docs/dpserve.md
	rng := rand.New(rand.NewPCG(31, 1))
	cl := natstest.StartCluster(t, 3)
	cfg := testConfig(t)

	var fronts []*Node
	for range 2 {
		fronts = append(fronts, dial(t, cl.URLs(), cfg))
	}
	aggs := []*aggProc{startAggregator(t, cl.URLs(), cfg), startAggregator(t, cl.URLs(), cfg)}
	t.Cleanup(func() {
		for _, a := range aggs {
			a.kill()
		}
	})

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// A request is given up after 10 s, as an HTTP client would.
	const requestTimeout = 10 * time.Second
	var ackMu sync.Mutex
	acked := map[string]bool{} // log ids of acknowledged contributions
	// Load: each client sends contributions with fresh ids and retries a
	// failure with the same key until acknowledged.
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id, key := fmt.Sprintf("w%d-%d", g, i), fmt.Sprintf("k%d", i)
				for try := 0; ; try++ {
					if ctx.Err() != nil {
						return
					}
					actx, cancel := context.WithTimeout(WithIdempotencyKey(context.Background(), key), requestTimeout)
					_, err := fronts[(g+try)%2].Add(actx, id, []float64{0.5, 0.25})
					cancel()
					var logged *LoggedError
					if err == nil || errors.As(err, &logged) {
						ackMu.Lock()
						acked["add:"+id+":"+key] = true
						ackMu.Unlock()
						break
					}
					if errors.Is(err, aggregate.ErrRejected) {
						t.Errorf("contribution %s: %v", id, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	// Commits every 150 ms; every release seen is remembered.
	var seenMu sync.Mutex
	seen := map[int][]byte{}
	var lastCommit atomic.Int64
	lastCommit.Store(time.Now().UnixNano())
	remember := func(rel *aggregate.Release) {
		if rel == nil || rel.Step < 1 {
			return
		}
		seenMu.Lock()
		defer seenMu.Unlock()
		canon, _ := json.Marshal(rel)
		if old, ok := seen[rel.Step]; ok && !bytes.Equal(old, canon) {
			t.Errorf("release %d changed: %s then %s", rel.Step, old, canon)
		}
		seen[rel.Step] = canon
	}
	commit := func(i int) bool {
		cctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		rel, err := fronts[i%2].Commit(cctx)
		if err != nil {
			return false
		}
		remember(rel)
		lastCommit.Store(time.Now().UnixNano())
		return true
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			commit(i)
			time.Sleep(150 * time.Millisecond)
		}
	}()
	// Ledger and release readers on both front-ends.
	for f := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last aggregate.Ledger
			for ctx.Err() == nil {
				l := fronts[f].Ledger()
				if l.Steps < last.Steps || l.EpsilonSpent < last.EpsilonSpent {
					t.Errorf("front-end %d: ledger decreased from %d steps (epsilon %g) to %d (%g)", f, last.Steps, last.EpsilonSpent, l.Steps, l.EpsilonSpent)
				}
				last = l
				if l.Steps > 0 {
					if rel, err := fronts[f].Release(1 + rand.IntN(l.Steps)); err == nil {
						remember(rel)
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}

	// Faults.
	var worst time.Duration
	waitResume := func(what string) {
		t0 := time.Now()
		for time.Since(t0) < resumeBound {
			if lastCommit.Load() > t0.UnixNano() {
				d := time.Since(t0)
				t.Logf("%s: a commit succeeded %.1fs later", what, d.Seconds())
				worst = max(worst, d)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		buf := make([]byte, 1<<22)
		os.WriteFile(filepath.Join(os.TempDir(), "dpserve-failover-stacks.txt"), buf[:runtime.Stack(buf, true)], 0o600)
		t.Fatalf("%s: no commit succeeded within %v (goroutines in %s)", what, resumeBound, filepath.Join(os.TempDir(), "dpserve-failover-stacks.txt"))
	}
	sleep := func(lo, hi time.Duration) { time.Sleep(lo + time.Duration(rng.Int64N(int64(hi-lo)))) }
	leaderOf := func() int {
		for range 200 {
			for i, a := range aggs {
				lctx, cancel := context.WithTimeout(context.Background(), time.Second)
				e, err := a.r.lease.Get(lctx, "leader")
				cancel()
				if err == nil && string(e.Value()) == a.r.id {
					return i
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatal("no aggregator holds the lease")
		return -1
	}
	waitResume("start")
	for round := range rounds {
		sleep(500*time.Millisecond, 2*time.Second)
		i := leaderOf()
		aggs[i].kill()
		aggs[i] = startAggregator(t, cl.URLs(), cfg)
		waitResume(fmt.Sprintf("round %d: leader aggregator killed", round))
		sleep(200*time.Millisecond, 1500*time.Millisecond)
		n := rng.IntN(3)
		cl.Kill(n)
		sleep(500*time.Millisecond, 2*time.Second)
		cl.Start(n)
		waitResume(fmt.Sprintf("round %d: NATS node %d killed and restarted", round, n))
	}
	stop()
	wg.Wait()
	// A last commit closes the step that holds the last contributions. A
	// request a client gave up on (its 10 s timeout) can still reach the
	// log afterwards, and so can what a reconnecting front-end buffered:
	// such a contribution was never acknowledged, and it is counted in the
	// step after it lands. So commit until a release covers the whole log.
	settled := func() bool {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		T, err := fronts[0].head(sctx)
		if err != nil {
			return false
		}
		rec, _, err := fronts[0].record(sctx, T)
		if err != nil {
			return false
		}
		st, err := fronts[0].js.Stream(sctx, fronts[0].stream)
		if err != nil {
			return false
		}
		last, err := st.GetLastMsgForSubject(sctx, fronts[0].subjAdd)
		return err == nil && last.Sequence <= rec.Seq
	}
	for i, late := 0, 0; ; i++ {
		if i > 300 {
			t.Fatal("the final commit did not succeed")
		}
		if !commit(i) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if settled() {
			if late > 0 {
				t.Logf("contributions reached the log after the first final commit; %d more commits covered them", late)
			}
			break
		}
		if late++; late == 20 {
			t.Fatal("no final commit covered the whole log within 20 s")
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d rounds, %d contributions acknowledged, %d releases seen; worst time to a successful commit after a fault %.1fs (bound %v)",
		rounds, len(acked), len(seen), worst.Seconds(), resumeBound)

	// The log: every id once, every acknowledged id present.
	r := fronts[0]
	vctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	T, err := r.head(vctx)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*releaseRecord
	for s := 1; s <= T; s++ {
		rec, _, err := r.record(vctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if s > 1 && rec.Seq <= recs[s-2].Seq {
			t.Fatalf("release %d covers log position %d, release %d position %d", s, rec.Seq, s-1, recs[s-2].Seq)
		}
		canon, _ := json.Marshal(&aggregate.Release{Step: s, Sum: rec.Sum, HasCount: rec.HasCount, Count: rec.Count})
		if old, ok := seen[s]; ok && !bytes.Equal(old, canon) {
			t.Errorf("release %d: seen %s during the run, stored %s", s, old, canon)
		}
		recs = append(recs, rec)
	}
	cons, err := r.js.OrderedConsumer(vctx, r.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.subjAdd}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.js.Stream(vctx, r.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(vctx, jetstream.WithSubjectFilter(r.subjAdd))
	if err != nil {
		t.Fatal(err)
	}
	want := int(info.State.Subjects[r.subjAdd])
	ids := map[string]uint64{}
	var seqs []uint64
	for len(seqs) < want {
		b, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil || vctx.Err() != nil {
			t.Fatalf("reading the log: %v after %d of %d entries", err, len(seqs), want)
		}
		for m := range b.Messages() {
			md, _ := m.Metadata()
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if _, dup := ids[id]; dup {
				t.Fatalf("log id %s appears twice", id)
			}
			ids[id] = md.Sequence.Stream
			seqs = append(seqs, md.Sequence.Stream)
		}
	}
	missing := 0
	for id := range acked {
		if _, ok := ids[id]; !ok {
			if missing++; missing <= 5 {
				t.Errorf("acknowledged contribution %s is not in the log", id)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged contributions are not in the log", missing)
	}
	// The counts, with the seeded noise removed: release t counts exactly
	// the contributions logged before its commit.
	agg, released, _, err := r.restore(vctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer agg.Close()
	if released != T {
		t.Fatalf("restored %d releases, head %d", released, T)
	}
	nz, err := agg.SeededNoise(T)
	if err != nil {
		t.Fatal(err)
	}
	dim, clip := cfg.Aggregate.Dim, cfg.Aggregate.Clip
	k := 0
	for s, rec := range recs {
		for k < len(seqs) && seqs[k] <= rec.Seq {
			k++
		}
		count := rec.Count - nz[s][dim]/clip
		sum0 := rec.Sum[0] - nz[s][0]
		if math.Abs(count-float64(k)) > 1e-6*max(1, float64(k)) || math.Abs(sum0-0.5*float64(k)) > 1e-3*max(1, float64(k)) {
			t.Fatalf("release %d (log position %d): count %.6f and sum %.6f without noise; %d contributions logged before it", s+1, rec.Seq, count, sum0, k)
		}
	}
	if k != len(seqs) {
		t.Fatalf("%d contributions logged after the last release", len(seqs)-k)
	}
	t.Logf("%d releases, %d contributions in the log (%d acknowledged), each counted once in its step", T, len(seqs), len(acked))
}
