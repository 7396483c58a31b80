package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/authtoken"
	"github.com/dpmf-go/dpmf/internal/loadgen"
)

// TestLoad runs a bounded load (1000 contributions of d = 100 from 16
// clients, commits every 20 ms, at most 20 s) against the handler on
// loopback, plain and with TLS and tokens: every contribution is accepted,
// the ledger counts each once, and the acknowledgements loadgen writes
// (issue 28 item 13) name each contribution once with a released or open
// step. The throughput is logged; BENCHMARKS.md has the measured figures.
func TestLoad(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "tls+auth"}[secure]
		t.Run(name, func(t *testing.T) {
			cfg := loadgen.Config{Dim: 100, Workers: 16, Requests: 1000, Duration: 20 * time.Second,
				CommitEvery: 20 * time.Millisecond, Seed: 1}
			var acks bytes.Buffer
			cfg.Acks = &acks
			var ledgerTok string
			var srvURL string
			client := http.DefaultClient
			if secure {
				keyFile, key := writeKey(t)
				srv := serveHandler(t, true, "-dim", "100", "-horizon", "1000", "-auth-key", keyFile)
				srvURL, client = srv.URL, srv.Client()
				cfg.TLS = srv.Client().Transport.(*http.Transport).TLSClientConfig
				cfg.ContributorToken = func(id string) string { return mint(t, key, authtoken.Contributor, id, time.Hour) }
				cfg.OperatorToken = mint(t, key, authtoken.Operator, "", time.Hour)
				ledgerTok = cfg.OperatorToken
			} else {
				srvURL = testServerDim(t, 100, 1000).URL
			}
			cfg.URLs = []string{srvURL}
			res, err := loadgen.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res)
			if res.Accepted != 1000 || res.Failed != 0 || res.Rejected != 0 {
				t.Fatalf("%v; first error %s", res, res.FirstError)
			}
			req, _ := http.NewRequest("GET", srvURL+"/v1/ledger", nil)
			if ledgerTok != "" {
				req.Header.Set("Authorization", "Bearer "+ledgerTok)
			}
			resp, err := client.Do(req)
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
			seen := map[string]bool{}
			sc := bufio.NewScanner(&acks)
			for sc.Scan() {
				var a struct {
					Contributor string `json:"contributor"`
					Step        int    `json:"step"`
				}
				if err := json.Unmarshal(sc.Bytes(), &a); err != nil || a.Contributor == "" || seen[a.Contributor] || a.Step < 1 || a.Step > l.Steps+1 {
					t.Fatalf("acknowledgement %q: %v (steps %d)", sc.Text(), err, l.Steps)
				}
				seen[a.Contributor] = true
			}
			if len(seen) != 1000 {
				t.Fatalf("%d acknowledgements written, want 1000", len(seen))
			}
		})
	}
}
