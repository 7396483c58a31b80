package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func testServer(t *testing.T) *httptest.Server {
	return startHandler(t, "-dim", "3", "-horizon", "2", "-k", "2", "-b", "2", "-count")
}

func testServerDim(t *testing.T, dim, horizon int) *httptest.Server {
	return startHandler(t, "-dim", fmt.Sprint(dim), "-horizon", fmt.Sprint(horizon))
}

// startHandler serves the handler of a dpserve with these flags on
// 127.0.0.1.
func startHandler(t *testing.T, extra ...string) *httptest.Server {
	t.Helper()
	return serveHandler(t, false, extra...)
}

// serveHandler is startHandler, over TLS (httptest's certificate) if
// useTLS.
func serveHandler(t *testing.T, useTLS bool, extra ...string) *httptest.Server {
	t.Helper()
	args := append([]string{"-store", filepath.Join(t.TempDir(), "h.db"), "-mechanism", "tree-online",
		"-epsilon", "1", "-delta", "1e-6", "-clip", "1"}, extra...)
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := openAggregator(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	_, acc, err := setupAccess(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(newHandler(agg, handlerConfig{maxBody: o.maxBody, inflight: o.inflight, access: acc, config: map[string]any{"dim": o.dim}})) // 127.0.0.1
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() { srv.Close(); agg.Close() })
	return srv
}

func do(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %v", method, url, err)
	}
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%s %s: content type %q", method, url, resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, m
}

// TestAPI checks the HTTP contract: status codes, JSON errors, the release
// and ledger objects, and that a release reads back identically.
func TestAPI(t *testing.T) {
	srv := testServer(t)
	u := srv.URL
	big := `{"contributor":"x","vector":[` + strings.Repeat("1.0000000000000000001,", 200) + `1]}`
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		errHas                   string
	}{
		{"ok", "POST", "/v1/contributions", `{"contributor":"a","vector":[0.6,0.8,0]}`, 200, ""},
		{"repeat", "POST", "/v1/contributions", `{"contributor":"a","vector":[1,0,0]}`, 409, "too soon"},
		{"bad json", "POST", "/v1/contributions", `{"contributor":"b","vector":[1,0,`, 400, "bad JSON"},
		{"unknown field", "POST", "/v1/contributions", `{"contributor":"b","vector":[1,0,0],"weight":2}`, 400, "unknown field"},
		{"no vector", "POST", "/v1/contributions", `{"contributor":"b"}`, 400, "vector"},
		{"dimension", "POST", "/v1/contributions", `{"contributor":"b","vector":[1,0]}`, 400, "wrong dimension"},
		{"non-finite", "POST", "/v1/contributions", `{"contributor":"b","vector":[1e999,0,0]}`, 400, "1e999"},
		{"empty id", "POST", "/v1/contributions", `{"contributor":"","vector":[1,0,0]}`, 400, "contributor id"},
		{"too large", "POST", "/v1/contributions", big, 413, "over"},
		{"two values", "POST", "/v1/contributions", `{"contributor":"b","vector":[1,0,0]} {}`, 400, "more than one"},
		{"no release", "GET", "/v1/releases/1", "", 404, "no such release"},
		{"bad step", "GET", "/v1/releases/x", "", 400, "positive integer"},
		{"wrong method", "GET", "/v1/commit", "", 405, ""},
		{"no route", "GET", "/v2", "", 404, "no route"},
		{"health", "GET", "/healthz", "", 200, ""},
	} {
		code, m := do(t, c.method, u+c.path, c.body)
		if code != c.status {
			t.Errorf("%s: status %d, want %d (%v)", c.name, code, c.status, m)
		}
		if c.errHas != "" {
			if e, _ := m["error"].(string); !strings.Contains(e, c.errHas) {
				t.Errorf("%s: error %q, want it to mention %q", c.name, e, c.errHas)
			}
		}
	}
	code, rel := do(t, "POST", u+"/v1/commit", "")
	if code != 200 || rel["step"] != 1.0 || len(rel["release"].([]any)) != 3 || rel["count"] == nil || len(rel["mean"].([]any)) != 3 {
		t.Fatalf("commit: %d %v", code, rel)
	}
	code, again := do(t, "GET", u+"/v1/releases/1", "")
	a, _ := json.Marshal(rel)
	b, _ := json.Marshal(again)
	if code != 200 || !bytes.Equal(a, b) {
		t.Fatalf("GET release 1 = %s, commit answered %s", b, a)
	}
	do(t, "POST", u+"/v1/commit", "")
	if code, m := do(t, "POST", u+"/v1/commit", ""); code != 403 || !strings.Contains(m["error"].(string), "budget") {
		t.Fatalf("commit past the horizon: %d %v", code, m)
	}
	if code, m := do(t, "POST", u+"/v1/contributions", `{"contributor":"late","vector":[1,0,0]}`); code != 403 {
		t.Fatalf("contribution past the horizon: %d %v", code, m)
	}
	_, l := do(t, "GET", u+"/v1/ledger", "")
	for _, k := range []string{"epsilon_spent", "epsilon_budget", "delta", "steps", "contributions_accepted", "contributions_rejected"} {
		if _, ok := l[k]; !ok {
			t.Errorf("ledger lacks %q", k)
		}
	}
	if l["steps"] != 2.0 || l["contributions_accepted"] != 1.0 || l["contributions_rejected"] != 4.0 || l["epsilon_spent"].(float64) > 1 {
		t.Errorf("ledger %v", l)
	}
}

// TestFlags checks that bad flags exit with status 2 and one line.
func TestFlags(t *testing.T) {
	base := []string{"-store", filepath.Join(t.TempDir(), "f.db"), "-dim", "3", "-epsilon", "1", "-delta", "1e-6", "-horizon", "4", "-clip", "1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-dim", "3"}, "-store"},
		{append(base, "-mechanism", "nope"), "unknown mechanism"},
		{append(base, "-workload", "median"), "unknown workload"},
		{append(base, "-seed", "abc"), "64 hex digits"},
		{append(base, "-k", "0"), "at least 1"},
		{append(base, "-delta", "2"), "-delta"},
		{append(base, "-bogus"), "not defined"},
		{append(base, "-commit-every", "-1s"), "-commit-every"},
	} {
		var stderr bytes.Buffer
		// Should a case wrongly start serving, the deadline stops it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, append(c.args, "-addr", "127.0.0.1:0"), io.Discard, &stderr)
		cancel()
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", c.args, code, stderr.String())
		}
		msg := stderr.String()
		if lastLine := strings.TrimSpace(msg[strings.LastIndex(strings.TrimSpace(msg), "\n")+1:]); !strings.Contains(lastLine, c.want) || !strings.HasPrefix(lastLine, "dpserve: ") {
			t.Errorf("%v: message %q, want a dpserve: line mentioning %q", c.args, msg, c.want)
		}
	}
}

// TestTicker checks -commit-every: the server commits by itself until the
// horizon is reached, then stops committing.
func TestTicker(t *testing.T) {
	srv := startServer(t, "-store", filepath.Join(t.TempDir(), "t.db"), "-dim", "2", "-epsilon", "1", "-delta", "1e-6",
		"-horizon", "3", "-clip", "1", "-commit-every", "20ms")
	deadline := time.Now().Add(20 * time.Second)
	for {
		var l struct{ Steps int }
		if code, err := call("GET", srv.base+"/v1/ledger", nil, &l); err != nil || code != 200 {
			t.Fatalf("ledger: %d %v", code, err)
		}
		if l.Steps == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d steps after 20 s of 20 ms ticks", l.Steps)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-srv.exited; err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
	if !strings.Contains(srv.stderr.String(), "budget exhausted") {
		t.Errorf("stderr %q, want the ticker's stop at the budget", srv.stderr)
	}
}

// TestStoreMismatch checks that a store is reopened only with the flags it
// was created with, with a one-line message naming the difference.
func TestStoreMismatch(t *testing.T) {
	store := filepath.Join(t.TempDir(), "m.db")
	base := []string{"-store", store, "-dim", "3", "-epsilon", "1", "-delta", "1e-6", "-horizon", "4", "-clip", "1"}
	o, err := parseFlags(append(base, "-mechanism", "tree-online"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := openAggregator(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	agg.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(base, "-mechanism", "dpsgd"), "created with tree-online"},
		{append(slices.Clone(base), "-clip", "2"), "clip: store has 1, asked for 2"},
		{append(slices.Clone(base[:len(base)-4]), "-horizon", "8", "-clip", "1"), "created for prefix(n=4)"},
	} {
		var stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code := run(ctx, append(c.args, "-addr", "127.0.0.1:0"), io.Discard, &stderr)
		cancel()
		if msg := stderr.String(); code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%v: exit %d, message %q; want a one-line refusal mentioning %q", c.args, code, msg, c.want)
		}
	}
}
