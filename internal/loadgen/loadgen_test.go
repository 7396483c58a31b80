package loadgen

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestRefusesNonLoopback(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:80", "http://example.com", "http://0.0.0.0:1", "::"} {
		_, err := Run(context.Background(), Config{URLs: []string{u}, Dim: 1, Workers: 1, Requests: 1, Duration: time.Second})
		if err == nil || !strings.Contains(err.Error(), "loopback") && !strings.Contains(err.Error(), "URL") {
			t.Errorf("%s: %v, want a refusal", u, err)
		}
	}
	if err := checkLoopback("http://[::1]:8080"); err != nil {
		t.Error(err)
	}
	if err := checkLoopback("http://127.0.0.1:8080"); err != nil {
		t.Error(err)
	}
}

// TestBackoff checks that clients back off from a dead server (issue 28
// item 13: about 100,000 failed requests in 3 s before) and from one that
// answers 503: with 4 clients for 1 s and backoff from 10 ms doubling to
// 1 s, each client sends at most about 8 requests.
func TestBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"closed"}`, http.StatusServiceUnavailable)
	}))
	defer unavailable.Close()
	for _, u := range []string{dead, unavailable.URL} {
		res, err := Run(context.Background(), Config{URLs: []string{u}, Dim: 2, Workers: 4, Requests: 1 << 30, Duration: 900 * time.Millisecond, Drain: 100 * time.Millisecond})
		if err == nil {
			t.Errorf("%s: no error", u)
		}
		if n := res.Failed + res.Retries; n < 4 || n > 60 {
			t.Errorf("%s: %d failed requests in 1 s from 4 clients, want 4..60 (backoff)", u, n)
		}
	}
}

// TestResultJSON checks the snake_case keys and durations in seconds.
func TestResultJSON(t *testing.T) {
	b, err := json.Marshal(Result{Sent: 3, Accepted: 2, Elapsed: 1500 * time.Millisecond, P50: 2 * time.Millisecond, PerSecond: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	if m["sent"] != 3.0 || m["accepted"] != 2.0 || m["elapsed_seconds"] != 1.5 || m["latency_p50_seconds"] != 0.002 || m["contributions_per_second"] != 1.5 {
		t.Errorf("%s", b)
	}
	for k := range m {
		if strings.ToLower(k) != k {
			t.Errorf("key %q is not snake_case: %s", k, b)
		}
	}
}
