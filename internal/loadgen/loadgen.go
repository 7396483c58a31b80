// Package loadgen drives a dpserve instance on a loopback address with
// concurrent contributions (and optional periodic commits), bounded in
// request count and time, and reports sustained throughput and latency.
// A client whose request fails (no connection, a 5xx, a 429) backs off
// exponentially before its next one, so a dead server is not hammered.
package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Config bounds and shapes a load run.
type Config struct {
	// BaseURL is the server, e.g. "http://127.0.0.1:8377"; only loopback
	// hosts are accepted.
	BaseURL string
	// Dim is the vector dimension the server expects.
	Dim int
	// Workers is the number of concurrent clients (each one request at a
	// time).
	Workers int
	// Requests bounds the contributions sent; Duration bounds the time.
	// Both must be positive.
	Requests int
	Duration time.Duration
	// CommitEvery commits a step at this interval; 0 never commits.
	CommitEvery time.Duration
	// IDPrefix makes contributor ids unique across runs on one store.
	IDPrefix string
	// Seed drives the vector values.
	Seed uint64
	// Acks, if set, receives one JSON line {"contributor": ID, "step": T}
	// per acknowledged contribution, as acknowledgements arrive.
	Acks io.Writer
	// ContributorToken, if set, gives the bearer token of a contributor id
	// (for a server with -auth-key); OperatorToken is sent with commits.
	ContributorToken func(id string) string
	OperatorToken    string
	// TLS configures an https BaseURL (its RootCAs, for a self-signed
	// certificate); nil uses the system's roots.
	TLS *tls.Config
	// MinBackoff and MaxBackoff bound the pause of a client after a
	// failed request: it doubles from MinBackoff after each failure in a
	// row, up to MaxBackoff, and resets after a success. Zero means 10 ms
	// and 1 s.
	MinBackoff, MaxBackoff time.Duration
}

// Result is what a run measured. Latencies are of accepted contributions,
// from sending the request to reading the durable acknowledgement. Its
// JSON has snake_case keys and durations in seconds, like the rest of the
// project's JSON.
type Result struct {
	Sent, Accepted, Rejected, Failed int
	Commits                          int
	Elapsed                          time.Duration
	// PerSecond is Accepted / Elapsed.
	PerSecond     float64
	P50, P99, Max time.Duration
	// FirstError is the first failure or rejection seen, if any.
	FirstError string
}

// MarshalJSON encodes the result with snake_case keys and seconds.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Sent           int     `json:"sent"`
		Accepted       int     `json:"accepted"`
		Rejected       int     `json:"rejected"`
		Failed         int     `json:"failed"`
		Commits        int     `json:"commits"`
		ElapsedSeconds float64 `json:"elapsed_seconds"`
		PerSecond      float64 `json:"contributions_per_second"`
		P50Seconds     float64 `json:"latency_p50_seconds"`
		P99Seconds     float64 `json:"latency_p99_seconds"`
		MaxSeconds     float64 `json:"latency_max_seconds"`
		FirstError     string  `json:"first_error,omitempty"`
	}{r.Sent, r.Accepted, r.Rejected, r.Failed, r.Commits, r.Elapsed.Seconds(), r.PerSecond,
		r.P50.Seconds(), r.P99.Seconds(), r.Max.Seconds(), r.FirstError})
}

func (r Result) String() string {
	return fmt.Sprintf("%d accepted (%d rejected, %d failed) in %.2fs: %.0f contributions/s, latency p50 %.2fms p99 %.2fms max %.2fms, %d commits",
		r.Accepted, r.Rejected, r.Failed, r.Elapsed.Seconds(), r.PerSecond,
		ms(r.P50), ms(r.P99), ms(r.Max), r.Commits)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// checkLoopback refuses any host that is not a loopback address.
func checkLoopback(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("loadgen: base URL %q: %w", base, err)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("loadgen: host %q is not a loopback address; load is only generated on loopback", host)
	}
	return nil
}

// Check refuses a configuration Run cannot use: a base URL that is not on
// a loopback address, a dimension, worker count, request count or duration
// that is not positive, a negative commit interval.
func (cfg Config) Check() error {
	if err := checkLoopback(cfg.BaseURL); err != nil {
		return err
	}
	if cfg.Dim < 1 || cfg.Workers < 1 || cfg.Requests < 1 || cfg.Duration <= 0 {
		return fmt.Errorf("loadgen: dim %d, workers %d, requests %d and duration %v must be positive", cfg.Dim, cfg.Workers, cfg.Requests, cfg.Duration)
	}
	if cfg.CommitEvery < 0 {
		return fmt.Errorf("loadgen: commit interval %v must not be negative", cfg.CommitEvery)
	}
	return nil
}

// Run sends contributions until cfg.Requests are sent, cfg.Duration has
// passed or ctx ends.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Check(); err != nil {
		return Result{}, err
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 10 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Workers + 1, MaxConnsPerHost: cfg.Workers + 1, TLSClientConfig: cfg.TLS}
	defer tr.CloseIdleConnections()
	r := &run{cfg: cfg, ctx: ctx, client: &http.Client{Transport: tr}}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() { r.worker(w) })
	}
	if cfg.CommitEvery > 0 {
		wg.Go(r.committer)
	}
	// Commits stop with the contributions.
	go r.stopWhenDone(cancel)
	wg.Wait()
	return r.result(time.Since(start))
}

// run is the state one Run shares between its workers and its committer;
// mu guards res, lat and firstErr.
type run struct {
	cfg    Config
	ctx    context.Context
	client *http.Client
	sent   atomic.Int64

	mu       sync.Mutex
	res      Result
	lat      []time.Duration
	firstErr string
}

// note keeps the first error seen; the caller holds mu.
func (r *run) note(s string) {
	if r.firstErr == "" {
		r.firstErr = s
	}
}

// worker is a contributor's state: its buffers, counts and backoff.
type worker struct {
	vec, body, ack []byte
	local          []time.Duration
	acc, rej, fail int
	pause          time.Duration // the current backoff; 0 after a success
}

// worker sends contributions until the requests are all sent or the run
// ends, then adds its counts and latencies to the result.
func (r *run) worker(w int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(w)))
	// The vector part is encoded once per worker; ids vary.
	wk := &worker{vec: vectorJSON(rng, r.cfg.Dim)}
	for r.ctx.Err() == nil {
		i := r.sent.Add(1)
		if i > int64(r.cfg.Requests) {
			break
		}
		r.contribute(wk, r.cfg.IDPrefix+strconv.FormatInt(i, 10))
	}
	r.mu.Lock()
	r.res.Accepted += wk.acc
	r.res.Rejected += wk.rej
	r.res.Failed += wk.fail
	r.lat = append(r.lat, wk.local...)
	r.mu.Unlock()
}

// vectorJSON is the vector part of a contribution's body: dim Gaussians of
// standard deviation 0.1.
func vectorJSON(rng *rand.Rand, dim int) []byte {
	vec := []byte(`,"vector":[`)
	for i := range dim {
		if i > 0 {
			vec = append(vec, ',')
		}
		vec = strconv.AppendFloat(vec, rng.NormFloat64()*0.1, 'g', 8, 64)
	}
	return append(vec, "]}"...)
}

// contribute posts one contribution of contributor id and counts the
// outcome: an accepted one is timed (and acknowledged to cfg.Acks), a
// failure or an overloaded server backs off.
func (r *run) contribute(wk *worker, id string) {
	wk.body = append(wk.body[:0], `{"contributor":"`...)
	wk.body = append(wk.body, id...)
	wk.body = append(wk.body, '"')
	wk.body = append(wk.body, wk.vec...)
	tok := ""
	if r.cfg.ContributorToken != nil {
		tok = r.cfg.ContributorToken(id)
	}
	t0 := time.Now()
	code, msg, err := post(r.ctx, r.client, r.cfg.BaseURL+"/v1/contributions", tok, wk.body)
	d := time.Since(t0)
	switch {
	case err != nil:
		if r.ctx.Err() != nil {
			break
		}
		wk.fail++
		r.mu.Lock()
		r.note(err.Error())
		r.mu.Unlock()
		r.backoff(wk)
	case code == http.StatusOK:
		wk.acc++
		wk.local = append(wk.local, d)
		wk.pause = 0
		if r.cfg.Acks != nil {
			r.acknowledge(wk, id, msg)
		}
	default:
		wk.rej++
		r.mu.Lock()
		r.note(fmt.Sprintf("status %d: %s", code, msg))
		r.mu.Unlock()
		if code >= 500 || code == http.StatusTooManyRequests {
			r.backoff(wk)
		}
	}
}

// acknowledge writes the step the server acknowledged for contributor id
// to cfg.Acks.
func (r *run) acknowledge(wk *worker, id, msg string) {
	var a struct {
		Step int `json:"step"`
	}
	json.Unmarshal([]byte(msg), &a)
	wk.ack = fmt.Appendf(wk.ack[:0], "{\"contributor\":%q,\"step\":%d}\n", id, a.Step)
	r.mu.Lock()
	r.cfg.Acks.Write(wk.ack)
	r.mu.Unlock()
}

// backoff doubles the worker's pause within [MinBackoff, MaxBackoff] and
// waits it out (or the end of the run).
func (r *run) backoff(wk *worker) {
	wk.pause = min(r.cfg.MaxBackoff, max(r.cfg.MinBackoff, 2*wk.pause))
	select {
	case <-r.ctx.Done():
	case <-time.After(wk.pause):
	}
}

// committer asks the server to commit every cfg.CommitEvery until the run
// ends.
func (r *run) committer() {
	tick := time.NewTicker(r.cfg.CommitEvery)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		code, msg, err := post(r.ctx, r.client, r.cfg.BaseURL+"/v1/commit", r.cfg.OperatorToken, nil)
		r.mu.Lock()
		if err == nil && code == http.StatusOK {
			r.res.Commits++
		} else if err == nil {
			r.note(fmt.Sprintf("commit: status %d: %s", code, msg))
		}
		r.mu.Unlock()
	}
}

// stopWhenDone ends the run (cancel) once every request is sent and
// answered, which stops the committer.
func (r *run) stopWhenDone(cancel context.CancelFunc) {
	for r.ctx.Err() == nil && r.sent.Load() < int64(r.cfg.Requests) {
		time.Sleep(5 * time.Millisecond)
	}
	// Let the last contributions finish, then stop the committer.
	for r.ctx.Err() == nil {
		r.mu.Lock()
		done := r.res.Accepted+r.res.Rejected+r.res.Failed >= r.cfg.Requests
		r.mu.Unlock()
		if done {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
}

// result completes the counts with the elapsed time, the rate and the
// latency quantiles; a run with nothing accepted is an error.
func (r *run) result(elapsed time.Duration) (Result, error) {
	res := r.res
	res.Elapsed = elapsed
	res.Sent = res.Accepted + res.Rejected + res.Failed
	res.FirstError = r.firstErr
	if res.Elapsed > 0 {
		res.PerSecond = float64(res.Accepted) / res.Elapsed.Seconds()
	}
	if lat := r.lat; len(lat) > 0 {
		slices.Sort(lat)
		res.P50 = lat[len(lat)/2]
		res.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
		res.Max = lat[len(lat)-1]
	}
	if res.Accepted == 0 {
		return res, errors.New("loadgen: no contribution accepted: " + r.firstErr)
	}
	return res, nil
}

// post sends a request and returns the status and the answer (the body of
// a 200, trimmed).
func post(ctx context.Context, c *http.Client, url, token string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(bytes.TrimSpace(b)), nil
}
