package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/internal/loadgen"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsCluster is a JetStream cluster of in-process servers on loopback.
type natsCluster struct {
	t            *testing.T
	dirs         []string
	ports, route []int
	mu           sync.Mutex
	srvs         []*natsserver.Server
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startCluster(t *testing.T, n int) *natsCluster {
	c := &natsCluster{t: t, srvs: make([]*natsserver.Server, n)}
	for range n {
		c.dirs = append(c.dirs, t.TempDir())
		c.ports = append(c.ports, freePort(t))
		c.route = append(c.route, freePort(t))
	}
	for i := range n {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range n {
			c.kill(i)
		}
	})
	return c
}

func (c *natsCluster) start(i int) {
	c.t.Helper()
	var routes []string
	for j, p := range c.route {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		}
	}
	s, err := natsserver.NewServer(&natsserver.Options{
		ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: c.ports[i], NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: c.dirs[i], Username: testNATSUser, Password: testNATSPassword,
		Cluster: natsserver.ClusterOpts{Name: "dpserve-test", Host: "127.0.0.1", Port: c.route[i]},
		Routes:  natsserver.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		c.t.Fatalf("nats node %d did not start", i)
	}
	c.mu.Lock()
	c.srvs[i] = s
	c.mu.Unlock()
}

// kill stops node i at once (its clients see the connection drop).
func (c *natsCluster) kill(i int) {
	c.mu.Lock()
	s := c.srvs[i]
	c.srvs[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (c *natsCluster) urls() string {
	var u []string
	for _, p := range c.ports {
		u = append(u, fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", testNATSUser, testNATSPassword, p))
	}
	return strings.Join(u, ",")
}

const testSeed = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

func replicatedOptions(t *testing.T, urls string, extra ...string) options {
	t.Helper()
	args := append([]string{"-nats", urls, "-mechanism", "tree-online", "-epsilon", "1", "-delta", "1e-6", "-clip", "1",
		"-dim", "2", "-horizon", "1024", "-count", "-seed", testSeed, "-lease-ttl", "2s", "-work-dir", t.TempDir()}, extra...)
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// aggProc is an aggregator "process": killing it cancels its work and
// drops its connection without giving the lease up (as kill -9 would).
type aggProc struct {
	r      *replicated
	cancel context.CancelFunc
	done   chan struct{}
}

func startAggregator(t *testing.T, o options) *aggProc {
	t.Helper()
	r, err := dialReplicated(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	r.logf = func(format string, args ...any) { t.Logf(time.Now().Format("15:04:05.000 ")+format, args...) }
	ctx, cancel := context.WithCancel(context.Background())
	p := &aggProc{r: r, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(p.done); r.runAggregator(ctx) }()
	return p
}

func (p *aggProc) kill() {
	p.r.nc.Close()
	p.cancel()
	<-p.done
}

// TestReplicatedFailover runs the replicated mode on a 3-node JetStream
// cluster (replicas 3) with 2 front-ends and 2 aggregators (one leads,
// one stands by) under load from 4 clients that retry failures with the
// same Idempotency-Key, while the leading aggregator and one NATS node are
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
	cl := startCluster(t, 3)
	o := replicatedOptions(t, cl.urls())

	var fronts []*replicated
	var urls []string
	for range 2 {
		r, err := dialReplicated(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(newHandler(r, handlerConfig{maxBody: 4096, inflight: 16, access: access{now: time.Now}}))
		t.Cleanup(func() { srv.Close(); r.close() })
		fronts, urls = append(fronts, r), append(urls, srv.URL)
	}
	aggs := []*aggProc{startAggregator(t, o), startAggregator(t, o)}
	t.Cleanup(func() {
		for _, a := range aggs {
			a.kill()
		}
	})

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: 10 * time.Second}
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
				body := fmt.Sprintf(`{"contributor":%q,"vector":[0.5,0.25]}`, id)
				for try := 0; ; try++ {
					if ctx.Err() != nil {
						return
					}
					req, _ := http.NewRequest("POST", urls[(g+try)%2]+"/v1/contributions", strings.NewReader(body))
					req.Header.Set("Idempotency-Key", key)
					resp, err := hc.Do(req)
					if err == nil {
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode == 200 || resp.StatusCode == 202 {
							ackMu.Lock()
							acked["add:"+id+":"+key] = true
							ackMu.Unlock()
							break
						}
						if resp.StatusCode < 500 {
							t.Errorf("contribution %s: %d %s", id, resp.StatusCode, b)
							return
						}
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
	remember := func(b []byte) {
		var rj releaseJSON
		if json.Unmarshal(b, &rj) != nil || rj.Step < 1 {
			return
		}
		seenMu.Lock()
		defer seenMu.Unlock()
		canon, _ := json.Marshal(rj)
		if old, ok := seen[rj.Step]; ok && !bytes.Equal(old, canon) {
			t.Errorf("release %d changed: %s then %s", rj.Step, old, canon)
		}
		seen[rj.Step] = canon
	}
	commit := func(i int) bool {
		resp, err := hc.Post(urls[i%2]+"/v1/commit", "application/json", nil)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			remember(b)
			lastCommit.Store(time.Now().UnixNano())
			return true
		}
		return false
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
			var last struct {
				Steps int     `json:"steps"`
				Eps   float64 `json:"epsilon_spent"`
			}
			for ctx.Err() == nil {
				resp, err := hc.Get(urls[f] + "/v1/ledger")
				if err == nil {
					var l struct {
						Steps int     `json:"steps"`
						Eps   float64 `json:"epsilon_spent"`
					}
					json.NewDecoder(resp.Body).Decode(&l)
					resp.Body.Close()
					if l.Steps < last.Steps || l.Eps < last.Eps {
						t.Errorf("front-end %d: ledger decreased from %+v to %+v", f, last, l)
					}
					last = l
					if l.Steps > 0 {
						if resp, err := hc.Get(fmt.Sprintf("%s/v1/releases/%d", urls[f], 1+rand.IntN(l.Steps))); err == nil {
							b, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							if resp.StatusCode == 200 {
								remember(b)
							}
						}
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
		aggs[i] = startAggregator(t, o)
		waitResume(fmt.Sprintf("round %d: leader aggregator killed", round))
		sleep(200*time.Millisecond, 1500*time.Millisecond)
		n := rng.IntN(3)
		cl.kill(n)
		sleep(500*time.Millisecond, 2*time.Second)
		cl.start(n)
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
		rel := releaseJSON{Step: s, Release: rec.Sum}
		if rec.HasCount {
			c := rec.Count
			rel.Count, rel.Mean = &c, (&releaseJSONMean{rec.Sum, c}).mean()
		}
		canon, _ := json.Marshal(rel)
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
	dir := t.TempDir()
	agg, released, _, err := r.restore(vctx, dir)
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
	k := 0
	for s, rec := range recs {
		for k < len(seqs) && seqs[k] <= rec.Seq {
			k++
		}
		count := rec.Count - nz[s][o.dim]/o.clip
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

type releaseJSONMean struct {
	sum   []float64
	count float64
}

func (r *releaseJSONMean) mean() []float64 {
	m := make([]float64, len(r.sum))
	for i, v := range r.sum {
		m[i] = v / math.Max(r.count, 1)
	}
	return m
}

// dialTest connects a node with the test options plus extra to the
// cluster at urls, closed when the test ends.
func dialTest(t *testing.T, urls string, extra ...string) (*replicated, options) {
	t.Helper()
	o := replicatedOptions(t, urls, extra...)
	r, err := dialReplicated(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r, o
}

// startJetStream is one JetStream server on loopback.
func startJetStream(t *testing.T) string {
	t.Helper()
	return startNATS(t, &natsserver.Options{JetStream: true, StoreDir: t.TempDir()})
}

// The test servers' client credentials (dpserve needs credentials).
const testNATSUser, testNATSPassword = "dpserve", "test-password"

// startNATS is one NATS server on loopback with the options o and the
// test credentials; the URL returned carries them.
func startNATS(t *testing.T, o *natsserver.Options) string {
	t.Helper()
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
	o.Username, o.Password = testNATSUser, testNATSPassword
	s, err := natsserver.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server did not start")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return strings.Replace(s.ClientURL(), "nats://", "nats://"+testNATSUser+":"+testNATSPassword+"@", 1)
}

// TestReplicatedFencing: two aggregators that both believe they lead
// (one deposed but still running) apply the same log from the same
// stored state with their own CSPRNG noise: their releases for step 1
// differ, and only the first is stored; the second learns it is deposed
// and the stored release stays the first one's.
func TestReplicatedFencing(t *testing.T) {
	url := startJetStream(t)
	o := replicatedOptions(t, url, "-replicas", "1", "-seed", "")
	o.seed = ""
	var rs []*replicated
	for range 2 {
		r, err := dialReplicated(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		r.decisionWait = time.Millisecond
		t.Cleanup(r.close)
		rs = append(rs, r)
	}
	ctx := context.Background()
	for i := range 3 {
		if _, err := rs[0].Add(ctx, fmt.Sprintf("c%d", i), []float64{0.5, 0.5}); err == nil {
			t.Fatal("Add returned a step with no aggregator running")
		}
	}
	if _, err := rs[0].js.PublishMsg(ctx, natsMsg(rs[0].subjCmt), jetstream.WithMsgID("commit:1")); err != nil {
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

func TestReplicatedFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-store", "x.db", "-nats", "nats://127.0.0.1:4222"},
		{"-nats", "nats://127.0.0.1:4222", "-service", "a.b"},
		{"-nats", "nats://127.0.0.1:4222", "-replicas", "0"},
	} {
		args = append(args, "-dim", "2", "-horizon", "4", "-epsilon", "1", "-delta", "1e-6", "-clip", "1")
		var stderr bytes.Buffer
		if code := run(context.Background(), args, io.Discard, &stderr); code != 2 || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, %q", args, code, stderr.String())
		}
	}
}

func natsMsg(subject string) *nats.Msg { return nats.NewMsg(subject) }

// TestLoadModes runs the same load (4000 contributions of d = 100 from 16
// clients, a commit every 100 ms, at most 60 s) against the single-node
// mode (bbolt) and the replicated mode (3-node JetStream cluster on
// loopback, replicas 3, one front-end and its aggregator in this process),
// one after the other in one run, and logs both results for BENCHMARKS.md.
// Every contribution must be acknowledged with a step in both modes.
// Skipped under -short (about a minute).
func TestLoadModes(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: the load test in both modes takes about a minute")
	}
	cfg := loadgen.Config{Dim: 100, Workers: 16, Requests: 4000, Duration: 60 * time.Second,
		CommitEvery: 100 * time.Millisecond, Seed: 1}
	run := func(name, url string) {
		c := cfg
		c.URLs = []string{url}
		res, err := loadgen.Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v", name, res)
		if res.Accepted != cfg.Requests || res.Failed != 0 || res.Rejected != 0 {
			t.Fatalf("%s: %v; first error %s", name, res, res.FirstError)
		}
	}
	run("bbolt", testServerDim(t, 100, 1000).URL)

	cl := startCluster(t, 3)
	o := replicatedOptions(t, cl.urls(), "-dim", "100", "-count=false", "-seed", "")
	o.seed, o.count = "", false
	r, err := dialReplicated(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newHandler(r, handlerConfig{maxBody: o.maxBody, inflight: o.inflight, access: access{now: time.Now}}))
	t.Cleanup(func() { srv.Close(); r.close() })
	a := startAggregator(t, o)
	t.Cleanup(a.kill)
	run("replicated (3 nodes, replicas 3)", srv.URL)
}

// TestReplicatedContract: the replicated mode answers like the single-node
// mode (200 with the step, 400 for a wrong dimension, 409 past k, the
// commit's release served again by GET), and a retry with the same
// Idempotency-Key is counted once (without de-duplication the retry would
// be a second participation: 409, and two contributions in the ledger).
func TestReplicatedContract(t *testing.T) {
	r, o := dialTest(t, startJetStream(t), "-replicas", "1")
	srv := httptest.NewServer(newHandler(r, handlerConfig{maxBody: 4096, inflight: 4, access: access{now: time.Now}}))
	t.Cleanup(srv.Close)
	a := startAggregator(t, o)
	t.Cleanup(a.kill)
	post := func(path, body, key string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	// Wait for the aggregator, and for its decisions as long as needed.
	r.decisionWait, r.aliveWindow = time.Minute, 0
	for {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := r.lease.Get(lctx, "leader")
		cancel()
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := post("/v1/contributions", `{"contributor":"u0","vector":[0.5,0.5]}`, ""); code != 200 {
		t.Fatalf("contribution: %d %s", code, body)
	}
	for _, c := range []struct {
		body, key string
		code      int
		want      string
	}{
		{`{"contributor":"u1","vector":[0.3,0.4]}`, "a", 200, `{"step":1}`},
		{`{"contributor":"u1","vector":[0.3,0.4]}`, "a", 202, `"sequence"`}, // the retry: logged once, already decided
		{`{"contributor":"u1","vector":[0.3,0.4]}`, "b", 409, "participation limit"},
		{`{"contributor":"u2","vector":[0.3]}`, "", 400, "wrong dimension"},
	} {
		if code, body := post("/v1/contributions", c.body, c.key); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s (key %q): %d %s, want %d %s", c.body, c.key, code, body, c.code, c.want)
		}
	}
	code, body := post("/v1/commit", "", "")
	if code != 200 || !strings.Contains(body, `"step":1`) {
		t.Fatalf("commit: %d %s", code, body)
	}
	resp, err := http.Get(srv.URL + "/v1/releases/1")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(got)) != body {
		t.Fatalf("GET release 1: %s; commit answered %s", got, body)
	}
	// The ledger counts u0 and u1 once each, and the 409 rejection.
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

// TestServeReplicated runs dpserve -nats as the command does (flags,
// listener, front-end and aggregator in one process), contributes and
// commits over HTTP, and stops it with its context (SIGTERM): exit status
// 0, and the lease given up at once.
func TestServeReplicated(t *testing.T) {
	url := startJetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"-nats", url, "-replicas", "1", "-addr", "127.0.0.1:0", "-dim", "2", "-horizon", "4",
			"-epsilon", "1", "-delta", "1e-6", "-clip", "1", "-lease-ttl", "30s", "-work-dir", t.TempDir()}, pw, io.Discard)
		pw.Close()
	}()
	line := make([]byte, 200)
	n, err := pr.Read(line)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	addr := strings.Fields(string(line[:n]))[3]
	base := "http://" + addr
	// Until the aggregator leads, a contribution is answered 202 (logged)
	// at once; a new contributor each time, or the second would be over
	// the participation limit.
	for i := 0; ; i++ {
		resp, err := http.Post(base+"/v1/contributions", "application/json", strings.NewReader(fmt.Sprintf(`{"contributor":"u%d","vector":[0.1,0.2]}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if resp.StatusCode != 202 {
			t.Fatalf("contribution: %d", resp.StatusCode)
		}
	}
	resp, err := http.Post(base+"/v1/commit", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"step":1`) {
		t.Fatalf("commit: %d %s", resp.StatusCode, b)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit status %d", c)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dpserve did not stop")
	}
	// The lease was given up: a new candidate wins it at once (the TTL
	// is 30 s).
	o := replicatedOptions(t, url, "-replicas", "1", "-horizon", "4", "-count=false", "-seed", "", "-lease-ttl", "30s")
	o.seed, o.count = "", false
	r, err := dialReplicated(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if _, err := r.lease.Create(context.Background(), "leader", []byte("next")); err != nil {
		t.Fatalf("lease not given up: %v", err)
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
	r, _ := dialTest(t, startJetStream(t), "-replicas", "1")
	r.decisionWait = time.Millisecond
	var lost atomic.Int64
	r.state = lostReplyKV{r.state, &lost}
	ctx := context.Background()
	for i := range 3 {
		if _, err := r.Add(ctx, fmt.Sprintf("c%d", i), []float64{0.5, 0.5}); err == nil {
			t.Fatal("Add returned a step with no aggregator running")
		}
	}
	if _, err := r.js.PublishMsg(ctx, natsMsg(r.subjCmt), jetstream.WithMsgID("commit:1")); err != nil {
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
	url := startNATS(t, &natsserver.Options{})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	r := &replicated{nc: nc, o: options{service: "dpserve"}}
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
	cl := startCluster(t, 3)
	r, o := dialTest(t, cl.urls())
	ctx := context.Background()
	rounds := 3
	if testing.Short() {
		rounds = 2
	}
	step, reads, stale := 0, 0, 0
	for round := range rounds {
		cl.kill(round % 3)
		time.Sleep(300 * time.Millisecond)
		cl.start(round % 3)
		for t0 := time.Now(); time.Since(t0) < 2*time.Second; {
			next := step + 1
			rec, _ := json.Marshal(releaseRecord{Step: next, Sum: []float64{float64(next), 0},
				Ledger: aggregate.Ledger{Steps: next, Horizon: o.horizon}})
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := r.state.Create(wctx, relKey(next), rec)
			if err == nil || errors.Is(err, jetstream.ErrKeyExists) { // a retry of a write that landed
				l, _ := json.Marshal(aggregate.Ledger{Steps: next, Horizon: o.horizon})
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
	url := startJetStream(t)
	r, _ := dialTest(t, url, "-replicas", "1")
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

	o2 := replicatedOptions(t, url, "-replicas", "1", "-epsilon", "2")
	t0 = time.Now()
	_, err := dialReplicated(context.Background(), o2)
	if !errors.Is(err, aggregate.ErrStoreMismatch) || !strings.Contains(err.Error(), `"epsilon":1`) || !strings.Contains(err.Error(), `"epsilon":2`) {
		t.Fatalf("a node with -epsilon 2 on a cluster with 1: %v", err)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("the mismatch took %v to report", d)
	}
}

// TestReplicatedLedgerCoversReleases: right after each commit returned
// its release, and still after the service has been quiet for a while,
// the ledger, /healthz and GET /v1/releases served by a front-end count
// every release made. (The aggregator wrote the ledger only when a later
// contribution arrived: after four quiet commits the ledger stayed at the
// first release for good, under-reporting the epsilon spent.)
func TestReplicatedLedgerCoversReleases(t *testing.T) {
	r, o := dialTest(t, startJetStream(t), "-replicas", "1")
	srv := httptest.NewServer(newHandler(r, handlerConfig{maxBody: 4096, inflight: 4, access: access{now: time.Now}}))
	t.Cleanup(srv.Close)
	a := startAggregator(t, o)
	t.Cleanup(a.kill)
	r.decisionWait, r.aliveWindow = time.Minute, 0
	ctx := context.Background()
	if _, err := r.Add(ctx, "u0", []float64{0.5, 0.5}); err != nil {
		t.Fatal(err)
	}
	get := func(path string, out any) {
		t.Helper()
		if code, err := call("GET", srv.URL+path, nil, out); code != 200 || err != nil {
			t.Fatalf("GET %s: %d %v", path, code, err)
		}
	}
	check := func(want int) {
		t.Helper()
		var l aggregate.Ledger
		var h struct{ Steps int }
		var page releasePage
		get("/v1/ledger", &l)
		get("/healthz", &h)
		get("/v1/releases", &page)
		if l.Steps != want || h.Steps != want || page.Steps != want || len(page.Releases) != want {
			t.Fatalf("%d releases made; ledger %d steps (epsilon spent %g), /healthz %d, /v1/releases %d steps and %d releases",
				want, l.Steps, l.EpsilonSpent, h.Steps, page.Steps, len(page.Releases))
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

// TestMsgIDUnambiguous: distinct (kind, contributor, Idempotency-Key)
// give distinct de-duplication ids, printable ASCII only, among them the
// pair that collided (contributor a with key b:retry-1, contributor a:b
// with key retry-1: both were add:a:b:retry-1); an id whose old form was
// unambiguous is unchanged (a retry across an upgrade is still counted
// once).
func TestMsgIDUnambiguous(t *testing.T) {
	id := func(kind, c, k string) string {
		return msgID(context.WithValue(context.Background(), idempotencyKey{}, k), kind, c)
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
	r, o := dialTest(t, startJetStream(t), "-replicas", "1")
	a := startAggregator(t, o)
	t.Cleanup(a.kill)
	r.decisionWait, r.aliveWindow = time.Minute, 0
	withKey := func(k string) context.Context {
		return context.WithValue(context.Background(), idempotencyKey{}, k)
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
