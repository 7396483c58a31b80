package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/loadgen"
	"github.com/dpmf-go/dpmf/internal/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Tests of loadgen against dpserve (issue 39 item 14): what loadgen counts
// must agree with what the service stored.

// logCount is the number of contributions the replicated log of the
// service dpserve at url holds.
func logCount(t *testing.T, url string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "dpserve_LOG")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("dpserve.log.add"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects["dpserve.log.add"]
}

// readAcks decodes loadgen's -acks lines: each contributor once, with a
// step or a log position.
func readAcks(t *testing.T, b *bytes.Buffer) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	sc := bufio.NewScanner(b)
	for sc.Scan() {
		var a struct {
			Contributor string `json:"contributor"`
			Step        int    `json:"step"`
			Sequence    uint64 `json:"sequence"`
		}
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil || a.Contributor == "" || seen[a.Contributor] || (a.Step < 1) == (a.Sequence < 1) {
			t.Fatalf("acknowledgement %q: %v", sc.Text(), err)
		}
		seen[a.Contributor] = true
	}
	return seen
}

// TestLoadgenCountsLogged: with no aggregator, the replicated front-end
// answers every contribution 202 (durable in the log, step pending).
// loadgen counts them accepted, reports them as logged and writes them to
// -acks with their log position (before: all counted as rejected, and no
// acknowledgement written).
func TestLoadgenCountsLogged(t *testing.T) {
	url := natstest.StartJetStream(t)
	r := dialTest(t, replicatedOptions(t, url, "-replicas", "1"), 50*time.Millisecond)
	srv := httptest.NewServer(newHandler(r, handlerConfig{maxBody: 4096, inflight: 8, access: access{now: time.Now}}))
	t.Cleanup(srv.Close)
	var acks bytes.Buffer
	res, err := loadgen.Run(context.Background(), loadgen.Config{URLs: []string{srv.URL}, Dim: 2, Workers: 3, Requests: 12,
		Duration: 20 * time.Second, IDPrefix: "logged-", Acks: &acks})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 12 || res.Accepted != 12 || res.Logged != 12 || res.Rejected != 0 || res.Failed != 0 {
		t.Fatalf("%v (sent %d); first error %s", res, res.Sent, res.FirstError)
	}
	if n := len(readAcks(t, &acks)); n != 12 {
		t.Fatalf("%d acknowledgements written, want 12", n)
	}
	if n := logCount(t, url); n != 12 {
		t.Fatalf("log holds %d contributions, loadgen counted 12", n)
	}
}

// lossy answers nothing to the first request of each contributor (it is
// processed, then the connection is dropped), as a front-end that dies
// after the log confirmed a contribution.
func lossy(t *testing.T, h http.Handler, dropped *atomic.Int64) http.Handler {
	var mu sync.Mutex
	seen := map[string]bool{}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body bytes.Buffer
		body.ReadFrom(req.Body)
		var c struct {
			Contributor string `json:"contributor"`
		}
		json.Unmarshal(body.Bytes(), &c)
		req.Body = http.NoBody
		req2 := req.Clone(req.Context())
		req2.Body = readCloser{bytes.NewReader(body.Bytes())}
		mu.Lock()
		first := !seen[c.Contributor]
		seen[c.Contributor] = true
		mu.Unlock()
		if !first {
			h.ServeHTTP(w, req2)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), req2)
		dropped.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// TestLoadgenFailoverRetry gives loadgen three front-ends of one replicated
// service: a dead one, one that drops the answer to the first request of
// each contribution after logging it, and a sound one. Every contribution
// is acknowledged, none fails, and the log holds each exactly once: the
// retries went to the next URL with the same Idempotency-Key, which the
// log de-duplicated (before: one URL, no retry, no key: a third of the
// contributions failed outright and another third were logged but counted
// as failed).
func TestLoadgenFailoverRetry(t *testing.T) {
	url := natstest.StartJetStream(t)
	r := dialTest(t, replicatedOptions(t, url, "-replicas", "1"), 50*time.Millisecond)
	h := newHandler(r, handlerConfig{maxBody: 4096, inflight: 8, access: access{now: time.Now}})
	sound := httptest.NewServer(h)
	t.Cleanup(sound.Close)
	var dropped atomic.Int64
	dropping := httptest.NewServer(lossy(t, h, &dropped))
	t.Cleanup(dropping.Close)
	dead := httptest.NewServer(h)
	dead.Close()
	var acks bytes.Buffer
	res, err := loadgen.Run(context.Background(), loadgen.Config{URLs: []string{dead.URL, dropping.URL, sound.URL}, Dim: 2, Workers: 6,
		Requests: 30, Duration: 30 * time.Second, IDPrefix: "failover-", Acks: &acks, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v; %d answers dropped", res, dropped.Load())
	if res.Accepted != 30 || res.Failed != 0 || res.Rejected != 0 || res.Retries < 4 || dropped.Load() < 2 {
		t.Fatalf("%v; first error %s", res, res.FirstError)
	}
	if n := len(readAcks(t, &acks)); n != 30 {
		t.Fatalf("%d acknowledgements written, want 30", n)
	}
	if n := logCount(t, url); n != 30 {
		t.Fatalf("log holds %d contributions, loadgen counted 30", n)
	}
}

// TestLoadgenCountsInFlight: a single-node server that takes 300 ms to
// answer (after storing) is loaded by 8 clients for 1 s. The requests in
// flight when the time is up are waited for, so the ledger's count equals
// loadgen's (before: they were cancelled unanswered though stored, and the
// ledger exceeded loadgen's count by the number of clients).
func TestLoadgenCountsInFlight(t *testing.T) {
	srv := testServerDim(t, 2, 1000)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := httptest.NewRecorder()
		proxy(srv.URL, rec, req)
		time.Sleep(300 * time.Millisecond)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(slow.Close)
	res, err := loadgen.Run(context.Background(), loadgen.Config{URLs: []string{slow.URL}, Dim: 2, Workers: 8, Requests: 1 << 20,
		Duration: time.Second, IDPrefix: "inflight-"})
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Accepted int `json:"contributions_accepted"`
	}
	if code, err := call("GET", srv.URL+"/v1/ledger", nil, &l); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	if l.Accepted != res.Accepted || res.Failed != 0 || res.Accepted < 8 {
		t.Fatalf("ledger: %d accepted; loadgen: %v", l.Accepted, res)
	}
}

// proxy forwards req to base and copies the answer to w.
func proxy(base string, w http.ResponseWriter, req *http.Request) {
	out, _ := http.NewRequest(req.Method, base+req.URL.RequestURI(), req.Body)
	out.Header = req.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	w.Write(b.Bytes())
}
