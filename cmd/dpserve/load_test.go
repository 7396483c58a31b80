package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/loadgen"
)

// TestLoad runs a bounded load (1000 contributions of d = 100 from 16
// clients, commits every 20 ms, at most 20 s) against the handler on
// loopback: every contribution is accepted and the ledger counts each
// once. The throughput is logged; BENCHMARKS.md has the measured figures.
func TestLoad(t *testing.T) {
	srv := testServerDim(t, 100, 1000)
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		BaseURL: srv.URL, Dim: 100, Workers: 16, Requests: 1000, Duration: 20 * time.Second,
		CommitEvery: 20 * time.Millisecond, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if res.Accepted != 1000 || res.Failed != 0 || res.Rejected != 0 {
		t.Fatalf("%v; first error %s", res, res.FirstError)
	}
	resp, err := http.Get(srv.URL + "/v1/ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Accepted uint64 `json:"contributions_accepted"`
		Steps    int    `json:"steps"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	// A commit cut short by the end of the run may still have been made.
	if l.Accepted != 1000 || l.Steps < res.Commits || l.Steps > res.Commits+1 {
		t.Fatalf("ledger: %d accepted in %d steps; load generator: 1000 in %d commits", l.Accepted, l.Steps, res.Commits)
	}
}
