package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
)

// buildServer compiles this command once per test binary.
var buildServer = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "dpserve-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "dpserve")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// server is a running dpserve process on a loopback port.
type server struct {
	cmd    *exec.Cmd
	base   string
	stderr *bytes.Buffer
	exited chan error
}

var listening = regexp.MustCompile(`^dpserve: listening on (127\.0\.0\.1:\d+)$`)

func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	bin, err := buildServer()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		cmd.Wait()
		t.Fatalf("dpserve exited before listening: %s", s.stderr)
	}
	m := listening.FindStringSubmatch(lines.Text())
	if m == nil {
		t.Fatalf("dpserve printed %q", lines.Text())
	}
	s.base = "http://" + m[1]
	go func() {
		io.Copy(io.Discard, stdout)
		s.exited <- cmd.Wait()
	}()
	return s
}

func (s *server) kill(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited
}

var client = &http.Client{Timeout: 20 * time.Second}

// call sends a request and decodes a JSON answer into out (if non-nil).
func call(method, url string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding %s: %w", b, err)
		}
	}
	return resp.StatusCode, nil
}

const crashDim, crashClip = 4, 100.0

// crashVector is contribution i's vector: known to the checker, never
// clipped (norm < 30 < crashClip).
func crashVector(i int) []float64 {
	return []float64{1, float64(i % 7), float64((i * 13) % 17), float64(i % 3)}
}

// TestCrashRecovery kill -9s the real server at random moments under
// concurrent load (contributions from 4 clients, commits from a fifth) 20
// times, restarting it on the same store each time, then checks:
//   - every acknowledged contribution is in the releases exactly once, in
//     the step it was acknowledged for, and the only other contributions
//     present are ones whose request was cut by a crash (each contributor
//     joins once, k = 1, so a retry after the restart tells whether the
//     cut request had become durable: 200 no, 409 yes);
//   - every release read before a crash is bitwise unchanged after it;
//   - the ledger's steps, epsilon spent and accepted count never decrease.
//
// The noise is reconstructed from the test seed with package mfnoise, so
// the true per-step sums and counts are recovered exactly from the
// releases. Loopback only.
func TestCrashRecovery(t *testing.T) {
	const cycles, clients = 20, 4
	seed := bytes.Repeat([]byte{0x5a}, 32)
	store := filepath.Join(t.TempDir(), "crash.db")
	args := []string{"-store", store, "-dim", fmt.Sprint(crashDim), "-mechanism", "tree-online",
		"-epsilon", "8", "-delta", "1e-6", "-horizon", "1024", "-clip", fmt.Sprint(crashClip),
		"-k", "1", "-b", "1", "-count", "-seed", hex.EncodeToString(seed)}
	rng := rand.New(rand.NewPCG(1, 2))

	var (
		mu       sync.Mutex
		next     int             // next contribution id
		ackStep  = map[int]int{} // acknowledged contribution -> step
		cut      []int           // requests cut by a crash, to retry
		durable  []int           // cut requests found durable on retry (step unknown)
		releases = map[int][]float64{}
		counts   = map[int]float64{}
	)
	var last aggregate.Ledger
	checkLedger := func(base string) {
		var l aggregate.Ledger
		if code, err := call("GET", base+"/v1/ledger", nil, &l); err != nil || code != 200 {
			t.Fatalf("ledger: %d %v", code, err)
		}
		if l.Steps < last.Steps || l.EpsilonSpent < last.EpsilonSpent || l.ContributionsAccepted < last.ContributionsAccepted {
			t.Fatalf("ledger decreased: %+v -> %+v", last, l)
		}
		if l.Covered {
			t.Fatal("ledger claims a seeded run is covered by the guarantee")
		}
		last = l
	}
	checkReleases := func(base string) {
		mu.Lock()
		defer mu.Unlock()
		// A commit cut by the crash may have become durable: read it.
		for step := 1; step <= last.Steps; step++ {
			if _, ok := releases[step]; ok {
				continue
			}
			var r releaseJSON
			if code, err := call("GET", fmt.Sprintf("%s/v1/releases/%d", base, step), nil, &r); err != nil || code != 200 {
				t.Fatalf("release %d of %d: %d %v", step, last.Steps, code, err)
			}
			releases[step], counts[step] = r.Release, *r.Count
		}
		for step, want := range releases {
			var r releaseJSON
			if code, err := call("GET", fmt.Sprintf("%s/v1/releases/%d", base, step), nil, &r); err != nil || code != 200 {
				t.Fatalf("release %d: %d %v", step, code, err)
			}
			if !slicesEqual(r.Release, want) || r.Count == nil || *r.Count != counts[step] {
				t.Fatalf("release %d changed after a crash: %v, was %v", step, r.Release, want)
			}
		}
	}
	retry := func(base string) {
		mu.Lock()
		pending := cut
		cut = nil
		mu.Unlock()
		for _, id := range pending {
			var resp struct{ Step int }
			code, err := call("POST", base+"/v1/contributions", contribution{fmt.Sprint("c", id), crashVector(id)}, &resp)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			mu.Lock()
			switch code {
			case 200:
				ackStep[id] = resp.Step
			case 409:
				durable = append(durable, id)
			default:
				t.Fatalf("retry of c%d: status %d", id, code)
			}
			mu.Unlock()
		}
	}

	for cycle := 0; cycle <= cycles; cycle++ {
		srv := startServer(t, args...)
		checkLedger(srv.base)
		checkReleases(srv.base)
		retry(srv.base)
		if cycle == cycles {
			// Release the open step, then stop gracefully.
			var r releaseJSON
			if code, err := call("POST", srv.base+"/v1/commit", nil, &r); err != nil || code != 200 {
				t.Fatalf("final commit: %d %v", code, err)
			}
			releases[r.Step], counts[r.Step] = r.Release, *r.Count
			checkLedger(srv.base)
			srv.cmd.Process.Signal(syscall.SIGTERM)
			if err := <-srv.exited; err != nil {
				t.Fatalf("graceful shutdown: %v; stderr: %s", err, srv.stderr)
			}
			break
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for ctx.Err() == nil {
					mu.Lock()
					id := next
					next++
					mu.Unlock()
					var resp struct{ Step int }
					code, err := call("POST", srv.base+"/v1/contributions", contribution{fmt.Sprint("c", id), crashVector(id)}, &resp)
					mu.Lock()
					switch {
					case err != nil:
						cut = append(cut, id)
					case code == 200:
						ackStep[id] = resp.Step
					default:
						t.Errorf("c%d: status %d", id, code)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			})
		}
		crng := rand.New(rand.NewPCG(uint64(cycle), 9)) // the committer's own
		wg.Go(func() {
			for ctx.Err() == nil {
				time.Sleep(time.Duration(5+crng.IntN(20)) * time.Millisecond)
				var r releaseJSON
				code, err := call("POST", srv.base+"/v1/commit", nil, &r)
				if err != nil {
					return
				}
				if code != 200 {
					t.Errorf("commit: status %d", code)
					return
				}
				mu.Lock()
				releases[r.Step], counts[r.Step] = r.Release, *r.Count
				mu.Unlock()
			}
		})
		time.Sleep(time.Duration(30+rng.IntN(200)) * time.Millisecond)
		srv.kill(t)
		cancel()
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("%d crashes; %d contributions acknowledged, %d cut and found durable on retry; %d releases",
		cycles, len(ackStep), len(durable), len(releases))
	if len(ackStep) < 100 || last.Steps < 20 {
		t.Fatalf("too little load to test anything: %d contributions, %d steps", len(ackStep), last.Steps)
	}
	verifyExactlyOnce(t, store, seed, last, releases, counts, ackStep, durable)
}

func slicesEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// verifyExactlyOnce recovers each step's true sum and count from the
// releases by subtracting the seed's noise (aggregate's SeededNoise on the
// stopped server's store), and checks that step t holds exactly the
// contributions acknowledged for t plus some of the durable cut ones, each
// of those in exactly one step. The exact arithmetic rounds every vector
// coordinate to the ledger's grid (at most half a unit), so sums are
// compared to that tolerance; counts are exact.
func verifyExactlyOnce(t *testing.T, store string, seed []byte, l aggregate.Ledger, releases map[int][]float64, counts map[int]float64,
	ackStep map[int]int, durable []int) {
	t.Helper()
	spec, _ := privacy.ParseMechanism("tree-online")
	w, _ := dpcore.PrefixSum(l.Horizon)
	schema, _ := privacy.Participation{K: 1, B: 1}.Schema()
	mech, err := aggregate.BuildMechanism(context.Background(), spec, w, schema)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := aggregate.Open(context.Background(), store, aggregate.Config{Dim: crashDim, Workload: aggregate.Workload{Kind: aggregate.PrefixSum},
		Mechanism: mech, Epsilon: 8, Delta: 1e-6, Clip: crashClip, K: 1, B: 1, Count: true, Seed: (*dpcore.Seed)(seed)})
	if err != nil {
		t.Fatal(err)
	}
	seeded, err := agg.SeededNoise(l.Steps)
	agg.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]float64, l.Steps+1) // acknowledged sums per step, count last
	for i := range want {
		want[i] = make([]float64, crashDim+1)
	}
	for id, step := range ackStep {
		if step < 1 || step > l.Steps {
			t.Fatalf("c%d acknowledged for step %d of %d", id, step, l.Steps)
		}
		for j, v := range crashVector(id) {
			want[step][j] += v
		}
		want[step][crashDim]++
	}
	extra := make([]float64, crashDim+1) // what the durable cut requests add up to
	for _, id := range durable {
		for j, v := range crashVector(id) {
			extra[j] += v
		}
		extra[crashDim]++
	}
	prev := make([]float64, crashDim+1)
	prevNoise := make([]float64, crashDim+1)
	residual := make([]float64, crashDim+1)
	for step := 1; step <= l.Steps; step++ {
		rel, ok := releases[step]
		if !ok {
			t.Fatalf("release %d was never seen", step)
		}
		cur := append(append([]float64(nil), rel...), counts[step]*crashClip)
		for j := range cur {
			x := cur[j] - prev[j] - (seeded[step-1][j] - prevNoise[j])
			if j == crashDim {
				x /= crashClip
			}
			r := x - want[step][j]
			if j == crashDim && (r < -1e-6 || math.Abs(r-math.Round(r)) > 1e-6) {
				t.Fatalf("step %d: count %.9g, acknowledged %v: an acknowledged contribution is lost or misplaced", step, x, want[step][j])
			}
			residual[j] += r
		}
		prev, prevNoise = cur, seeded[step-1]
	}
	tol := 0.5 * l.Grid * float64(len(ackStep)+len(durable)) // below 1: a contribution adds 1 to coordinate 0
	for j := range residual {
		if math.Abs(residual[j]-extra[j]) > tol+1e-6*(1+math.Abs(extra[j])) {
			t.Fatalf("coordinate %d: releases hold %.9g beyond the acknowledged contributions, the durable cut ones add to %.9g (double counting?)", j, residual[j], extra[j])
		}
	}
	if got := uint64(len(ackStep) + len(durable)); l.ContributionsAccepted != got {
		t.Fatalf("ledger counts %d accepted contributions, the client knows of %d", l.ContributionsAccepted, got)
	}
}
