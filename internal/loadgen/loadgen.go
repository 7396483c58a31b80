// Package loadgen drives a dpserve instance on a loopback address with
// concurrent contributions (and optional periodic commits), bounded in
// request count and time, and reports sustained throughput and latency.
//
// A contribution whose request fails (no connection, no answer, a 5xx, a
// 429) is sent again with the same Idempotency-Key to the next of the
// configured URLs after a pause that doubles with each failure in a row,
// so a dead server is not hammered and a replicated service (which
// de-duplicates by the key) counts it once. When the time is up no new
// contribution is started, and the ones in flight are waited for (and
// retried) for at most Config.Drain, so that what the server stored and
// what the run counted agree.
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
	// URLs are the server's base URLs, e.g. "http://127.0.0.1:8377": one
	// for the single-node mode, the front-ends of the replicated mode
	// (clients start spread over them and move to the next after a
	// failure). Only loopback hosts are accepted.
	URLs []string
	// Dim is the vector dimension the server expects.
	Dim int
	// Workers is the number of concurrent clients (each one request at a
	// time).
	Workers int
	// Requests bounds the contributions sent; Duration bounds the time in
	// which new ones are started. Both must be positive.
	Requests int
	Duration time.Duration
	// Drain bounds the wait, after Duration, for the answers to the
	// contributions in flight (retries included); 0 means 10 s. A
	// contribution still unanswered then counts as failed.
	Drain time.Duration
	// CommitEvery commits a step at this interval; 0 never commits.
	CommitEvery time.Duration
	// IDPrefix makes contributor ids unique across runs on one store.
	IDPrefix string
	// Seed drives the vector values.
	Seed uint64
	// Acks, if set, receives one JSON line per acknowledged contribution,
	// as acknowledgements arrive: {"contributor": ID, "step": T} for an
	// applied one (200), {"contributor": ID, "sequence": N} for one the
	// replicated log holds at position N with its step not yet decided
	// (202).
	Acks io.Writer
	// ContributorToken, if set, gives the bearer token of a contributor id
	// (for a server with -auth-key); OperatorToken is sent with commits.
	ContributorToken func(id string) string
	OperatorToken    string
	// TLS configures https URLs (their RootCAs, for a self-signed
	// certificate); nil uses the system's roots.
	TLS *tls.Config
	// MinBackoff and MaxBackoff bound the pause of a client after a
	// failed request: it doubles from MinBackoff after each failure in a
	// row, up to MaxBackoff, and resets after a success. Zero means 10 ms
	// and 1 s.
	MinBackoff, MaxBackoff time.Duration
}

// Result is what a run measured. Sent counts contributions (distinct
// contributor ids), not requests: Sent = Accepted + Rejected + Failed.
// Accepted counts the durable acknowledgements: 200 with a step, and 202
// (replicated mode: in the log, step not yet decided), of which Logged
// counts the 202s. Rejected counts final refusals (4xx other than 429);
// Failed the contributions without a final answer at the end of the
// drain, which the server may or may not hold; Retries the requests sent
// again after a failure. Latencies are of accepted contributions, from
// the first request to the acknowledgement. Its JSON has snake_case keys
// and durations in seconds, like the rest of the project's JSON.
type Result struct {
	Sent, Accepted, Logged, Rejected, Failed int
	Retries                                  int
	Commits                                  int
	Elapsed                                  time.Duration
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
		Logged         int     `json:"accepted_logged"`
		Rejected       int     `json:"rejected"`
		Failed         int     `json:"failed"`
		Retries        int     `json:"retries"`
		Commits        int     `json:"commits"`
		ElapsedSeconds float64 `json:"elapsed_seconds"`
		PerSecond      float64 `json:"contributions_per_second"`
		P50Seconds     float64 `json:"latency_p50_seconds"`
		P99Seconds     float64 `json:"latency_p99_seconds"`
		MaxSeconds     float64 `json:"latency_max_seconds"`
		FirstError     string  `json:"first_error,omitempty"`
	}{r.Sent, r.Accepted, r.Logged, r.Rejected, r.Failed, r.Retries, r.Commits, r.Elapsed.Seconds(), r.PerSecond,
		r.P50.Seconds(), r.P99.Seconds(), r.Max.Seconds(), r.FirstError})
}

func (r Result) String() string {
	return fmt.Sprintf("%d accepted (%d of them logged, step pending; %d rejected, %d failed, %d retries) in %.2fs: %.0f contributions/s, latency p50 %.2fms p99 %.2fms max %.2fms, %d commits",
		r.Accepted, r.Logged, r.Rejected, r.Failed, r.Retries, r.Elapsed.Seconds(), r.PerSecond,
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

// Check refuses a configuration Run cannot use: no URL, a URL that is not
// on a loopback address, a dimension, worker count, request count or
// duration that is not positive, a negative drain or commit interval.
func (cfg Config) Check() error {
	if len(cfg.URLs) == 0 {
		return errors.New("loadgen: no server URL")
	}
	for _, u := range cfg.URLs {
		if err := checkLoopback(u); err != nil {
			return err
		}
	}
	if cfg.Dim < 1 || cfg.Workers < 1 || cfg.Requests < 1 || cfg.Duration <= 0 || cfg.Drain < 0 {
		return fmt.Errorf("loadgen: dim %d, workers %d, requests %d and duration %v must be positive, drain %v not negative", cfg.Dim, cfg.Workers, cfg.Requests, cfg.Duration, cfg.Drain)
	}
	if cfg.CommitEvery < 0 {
		return fmt.Errorf("loadgen: commit interval %v must not be negative", cfg.CommitEvery)
	}
	return nil
}

// Run sends contributions until cfg.Requests are sent, cfg.Duration has
// passed or ctx ends, then waits (at most cfg.Drain) for the answers to
// those in flight.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Check(); err != nil {
		return Result{}, err
	}
	if cfg.Drain == 0 {
		cfg.Drain = 10 * time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 10 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Second
	}
	// send ends the starting of new contributions (and commits); req,
	// Drain later, the requests themselves.
	req, cancelReq := context.WithTimeout(ctx, cfg.Duration+cfg.Drain)
	defer cancelReq()
	send, cancelSend := context.WithTimeout(req, cfg.Duration)
	defer cancelSend()
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.Workers + 1, MaxConnsPerHost: cfg.Workers + 1, TLSClientConfig: cfg.TLS}
	defer tr.CloseIdleConnections()
	r := &run{cfg: cfg, send: send, req: req, client: &http.Client{Transport: tr}}
	start := time.Now()
	var workers, committer sync.WaitGroup
	for w := range cfg.Workers {
		workers.Go(func() { r.worker(w) })
	}
	if cfg.CommitEvery > 0 {
		committer.Go(r.committer)
	}
	// Commits stop with the contributions.
	workers.Wait()
	cancelSend()
	committer.Wait()
	return r.result(time.Since(start))
}

// run is the state one Run shares between its workers and its committer;
// mu guards res, lat and firstErr.
type run struct {
	cfg       Config
	send, req context.Context
	client    *http.Client
	sent      atomic.Int64

	mu       sync.Mutex
	res      Result
	lat      []time.Duration
	firstErr string
}

// note keeps the first error seen.
func (r *run) note(s string) {
	r.mu.Lock()
	if r.firstErr == "" {
		r.firstErr = s
	}
	r.mu.Unlock()
}

// worker is a contributor's state: its buffers, counts, backoff and the
// URL it sends to.
type worker struct {
	vec, body, ack []byte
	local          []time.Duration
	res            Result
	pause          time.Duration // the current backoff; 0 after a success
	url            int           // index into cfg.URLs
}

// worker sends contributions until the requests are all sent or the time
// is up, then adds its counts and latencies to the result.
func (r *run) worker(w int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(w)))
	// The vector part is encoded once per worker; ids vary.
	wk := &worker{vec: vectorJSON(rng, r.cfg.Dim), url: w % len(r.cfg.URLs)}
	for r.send.Err() == nil {
		i := r.sent.Add(1)
		if i > int64(r.cfg.Requests) {
			break
		}
		r.contribute(wk, r.cfg.IDPrefix+strconv.FormatInt(i, 10))
	}
	r.mu.Lock()
	r.res.Accepted += wk.res.Accepted
	r.res.Logged += wk.res.Logged
	r.res.Rejected += wk.res.Rejected
	r.res.Failed += wk.res.Failed
	r.res.Retries += wk.res.Retries
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

// contribute posts one contribution of contributor id until it has a
// final answer or the drain ends, and counts the outcome: an accepted
// one is timed (and acknowledged to cfg.Acks); after a failure or an
// overloaded server the client backs off, moves to the next URL and
// sends it again with the same Idempotency-Key (the id: unique per run).
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
	for try := 0; ; try++ {
		if try > 0 {
			wk.res.Retries++
		}
		code, msg, err := post(r.req, r.client, r.cfg.URLs[wk.url]+"/v1/contributions", tok, id, wk.body)
		switch {
		case code == http.StatusOK || code == http.StatusAccepted:
			wk.res.Accepted++
			if code == http.StatusAccepted {
				wk.res.Logged++
			}
			wk.local = append(wk.local, time.Since(t0))
			wk.pause = 0
			if r.cfg.Acks != nil {
				r.acknowledge(wk, id, msg)
			}
			return
		case err == nil && code < 500 && code != http.StatusTooManyRequests:
			wk.res.Rejected++
			r.note(fmt.Sprintf("status %d: %s", code, msg))
			return
		case err != nil:
			if r.req.Err() == nil {
				r.note(err.Error())
			}
		default:
			r.note(fmt.Sprintf("status %d: %s", code, msg))
		}
		if r.req.Err() != nil || !r.backoff(wk) {
			wk.res.Failed++
			return
		}
		wk.url = (wk.url + 1) % len(r.cfg.URLs)
	}
}

// acknowledge writes the step (or the log position) the server
// acknowledged for contributor id to cfg.Acks.
func (r *run) acknowledge(wk *worker, id, msg string) {
	var a struct {
		Step     int    `json:"step"`
		Sequence uint64 `json:"sequence"`
	}
	json.Unmarshal([]byte(msg), &a)
	if a.Step == 0 && a.Sequence > 0 {
		wk.ack = fmt.Appendf(wk.ack[:0], "{\"contributor\":%q,\"sequence\":%d}\n", id, a.Sequence)
	} else {
		wk.ack = fmt.Appendf(wk.ack[:0], "{\"contributor\":%q,\"step\":%d}\n", id, a.Step)
	}
	r.mu.Lock()
	r.cfg.Acks.Write(wk.ack)
	r.mu.Unlock()
}

// backoff doubles the worker's pause within [MinBackoff, MaxBackoff] and
// waits it out; false if the drain ended first.
func (r *run) backoff(wk *worker) bool {
	wk.pause = min(r.cfg.MaxBackoff, max(r.cfg.MinBackoff, 2*wk.pause))
	select {
	case <-r.req.Done():
		return false
	case <-time.After(wk.pause):
		return true
	}
}

// committer asks the server to commit every cfg.CommitEvery until the
// contributions end, moving to the next URL after a failed commit. A
// commit is not retried (a retry of a commit whose answer was lost is a
// second commit, unless the server de-duplicates it): the next tick
// commits again.
func (r *run) committer() {
	tick := time.NewTicker(r.cfg.CommitEvery)
	defer tick.Stop()
	u := 0
	for {
		select {
		case <-r.send.Done():
			return
		case <-tick.C:
		}
		if r.send.Err() != nil {
			return
		}
		code, msg, err := post(r.req, r.client, r.cfg.URLs[u]+"/v1/commit", r.cfg.OperatorToken, "", nil)
		if err == nil && code == http.StatusOK {
			r.mu.Lock()
			r.res.Commits++
			r.mu.Unlock()
			continue
		}
		if err == nil {
			r.note(fmt.Sprintf("commit: status %d: %s", code, msg))
		}
		u = (u + 1) % len(r.cfg.URLs)
	}
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

// post sends a request (with the Idempotency-Key key, if not empty) and
// returns the status and the answer, trimmed.
func post(ctx context.Context, c *http.Client, url, token, key string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
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
