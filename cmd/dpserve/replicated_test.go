package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/aggregate/replica"
	"github.com/dpmf-go/dpmf/internal/loadgen"
	"github.com/dpmf-go/dpmf/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The replicated service itself is tested in package aggregate/replica;
// these tests are of the command: its flags, its connection and its
// HTTP answers.

const testSeed = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// replicatedOptions are the flags of the tests' nodes plus extra.
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

// nodeConfig is the configuration of a node under the flags o, as
// dpserve -nats makes it.
func nodeConfig(t *testing.T, o options) replica.Config {
	t.Helper()
	agg, err := checkRelease(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return replicaConfig(o, agg)
}

// dialTest starts a node of the replicated service with the flags o and
// the decision wait given (0: the default), closed when the test ends.
func dialTest(t *testing.T, o options, decisionWait time.Duration) *replica.Node {
	t.Helper()
	cfg := nodeConfig(t, o)
	cfg.DecisionWait = decisionWait
	r, nc, err := dialReplicated(context.Background(), o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); nc.Close() })
	return r
}

// startAggregator runs a node's aggregator under the flags o until the
// test ends.
func startAggregator(t *testing.T, o options) {
	t.Helper()
	r := dialTest(t, o, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.RunAggregator(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
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

	cl := natstest.StartCluster(t, 3)
	o := replicatedOptions(t, cl.URLs(), "-dim", "100", "-count=false", "-seed", "")
	r := dialTest(t, o, 0)
	srv := httptest.NewServer(newHandler(r, handlerConfig{maxBody: o.maxBody, inflight: o.inflight, access: access{now: time.Now}}))
	t.Cleanup(srv.Close)
	startAggregator(t, o)
	run("replicated (3 nodes, replicas 3)", srv.URL)
}

// TestServeReplicated runs dpserve -nats as the command does (flags,
// listener, front-end and aggregator in one process), contributes and
// commits over HTTP, and stops it with its context (SIGTERM): exit status
// 0, and the lease given up at once.
func TestServeReplicated(t *testing.T) {
	url := natstest.StartJetStream(t)
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
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := js.KeyValue(context.Background(), "dpserve_lease")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Create(context.Background(), "leader", []byte("next")); err != nil {
		t.Fatalf("lease not given up: %v", err)
	}
}

// stubEngine answers every contribution and commit with err.
type stubEngine struct{ err error }

func (s stubEngine) Add(context.Context, string, []float64) (int, error) { return 0, s.err }
func (s stubEngine) Commit(context.Context) (*aggregate.Release, error)  { return nil, s.err }
func (s stubEngine) Release(int) (*aggregate.Release, error)             { return nil, s.err }
func (s stubEngine) Ledger() aggregate.Ledger                            { return aggregate.Ledger{} }
func (s stubEngine) Dim() int                                            { return 2 }

// TestReplicatedAnswers: the HTTP answers to the replicated engine's own
// outcomes: 202 with the log position for a contribution logged but not
// decided yet, 503 with the message and Retry-After: 1 for a request the
// cluster did not answer (docs/dpserve.md promised Retry-After, which
// was sent with 429 only).
func TestReplicatedAnswers(t *testing.T) {
	for _, c := range []struct {
		err        error
		path       string
		code       int
		want       string
		retryAfter string
	}{
		{&replica.LoggedError{Sequence: 7}, "/v1/contributions", 202, `{"sequence":7,"status":"logged: the aggregator applies it in log order"}`, ""},
		{fmt.Errorf("wrapped: %w", replica.ErrUnavailable), "/v1/contributions", 503, `{"error":"wrapped: replica: the cluster did not answer"}`, "1"},
		{fmt.Errorf("wrapped: %w", replica.ErrUnavailable), "/v1/commit", 503, `{"error":"wrapped: replica: the cluster did not answer"}`, "1"},
		{errors.New("other"), "/v1/commit", 500, `{"error":"other"}`, ""},
	} {
		srv := httptest.NewServer(newHandler(stubEngine{c.err}, handlerConfig{maxBody: 4096, inflight: 4, access: access{now: time.Now}}))
		resp, err := http.Post(srv.URL+c.path, "application/json", strings.NewReader(`{"contributor":"u","vector":[0.1,0.2]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if ra := resp.Header.Get("Retry-After"); resp.StatusCode != c.code || strings.TrimSpace(string(b)) != c.want || ra != c.retryAfter {
			t.Errorf("%v on %s: %d %s (Retry-After %q), want %d %s (%q)", c.err, c.path, resp.StatusCode, b, ra, c.code, c.want, c.retryAfter)
		}
	}
}
