package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/aggregate/replica"
	"github.com/dpmf-go/dpmf/internal/authtoken"
)

type contribution struct {
	Contributor string    `json:"contributor"`
	Vector      []float64 `json:"vector"`
}

type releaseJSON struct {
	Step    int       `json:"step"`
	Release []float64 `json:"release"`
	Count   *float64  `json:"count,omitempty"`
	Mean    []float64 `json:"mean,omitempty"`
}

func toJSON(r *aggregate.Release) releaseJSON {
	out := releaseJSON{Step: r.Step, Release: r.Sum}
	if r.HasCount {
		c := r.Count
		out.Count, out.Mean = &c, r.Mean()
	}
	return out
}

// engine is what the handler serves: the single-node aggregator
// (*aggregate.Aggregator on a bbolt file) or a node of the replicated
// service (*replica.Node, -nats), with the same bounding, noise and
// release code behind both.
type engine interface {
	Add(ctx context.Context, contributor string, vec []float64) (int, error)
	Commit(ctx context.Context) (*aggregate.Release, error)
	Release(t int) (*aggregate.Release, error)
	Ledger() aggregate.Ledger
	Dim() int
}

// Both engines serve the API.
var (
	_ engine = (*aggregate.Aggregator)(nil)
	_ engine = (*replica.Node)(nil)
)

// handlerConfig is what the handler needs beyond the aggregator.
type handlerConfig struct {
	maxBody  int64
	inflight int
	access   access
	// config is the operator's view of the configuration (GET /v1/config).
	config map[string]any
}

// operatorOnly are the ledger fields served to the operator only: exact
// counts of contributions, which depend on private data (clipped: whether
// a vector's norm exceeded the clip norm) or make a private count
// pointless (accepted), and are not covered by the guarantee.
var operatorOnly = []string{"contributions_accepted", "contributions_rejected", "contributions_clipped"}

// privateOnly are the operator-only fields that depend on the private
// vectors themselves: they leave the process only to an operator who
// proved it with a credential, never to the unauthenticated local
// operator of the zero-configuration default.
var privateOnly = []string{"contributions_clipped"}

// ledgerView is the ledger as a principal may see it: all of it for an
// authenticated operator; without the clipped counter for the local
// operator of the zero-configuration default (which still sees the
// accepted and rejected counts: participation, public under zero-out
// adjacency); without the exact counters for anyone else.
func ledgerView(l aggregate.Ledger, p principal) (any, error) {
	withheld := operatorOnly
	switch {
	case p.operator() && !p.local:
		return l, nil
	case p.operator():
		withheld = privateOnly
	}
	b, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, k := range withheld {
		delete(m, k)
	}
	keep := []any{}
	for _, a := range l.Assumptions {
		if !strings.Contains(a, "contributions_accepted") {
			keep = append(keep, a)
		}
	}
	if p.operator() {
		keep = append(keep, "contributions_accepted and contributions_rejected are exact operational counters of participation (public under zero-out adjacency), not covered by the guarantee; "+
			"contributions_clipped depends on the private vectors and is served only with the operator credential (-auth-key)")
	} else {
		keep = append(keep, "served without the operator credential: the exact contribution counters ("+strings.Join(operatorOnly, ", ")+") are withheld")
	}
	m["assumptions"] = keep
	return m, nil
}

// newHandler serves the API; at most inflight contributions are read and
// decoded at once (the others wait), which bounds their memory.
func newHandler(agg engine, hc handlerConfig) http.Handler {
	s := &routes{agg: agg, hc: hc, sem: make(chan struct{}, hc.inflight), maxPage: max(1, min(1000, (1<<20)/agg.Dim()))}
	mux := http.NewServeMux()
	// handle wraps a route: the caller is identified first, and a bad
	// credential is answered before anything else is read.
	handle := func(pattern string, f func(w http.ResponseWriter, r *http.Request, p principal)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			p, err := hc.access.identify(r)
			if err != nil {
				writeError(w, err)
				return
			}
			f(w, r, p)
		})
	}
	handle("POST /v1/contributions", s.contribute)
	handle("POST /v1/commit", s.commit)
	handle("GET /v1/releases/{t}", s.release)
	handle("GET /v1/releases", s.releases)
	handle("GET /v1/ledger", s.ledger)
	handle("GET /v1/config", s.config)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "steps": agg.Ledger().Steps})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		noRoute(mux, w, r)
	})
}

// routes holds what the routes share: the engine, the configuration, the
// semaphore bounding the contributions decoded at once and the largest
// page of releases.
type routes struct {
	agg     engine
	hc      handlerConfig
	sem     chan struct{}
	maxPage int
}

// noRoute answers a request no route matches: the mux answers 404 or 405
// in plain text; this answers JSON with the same status (and Allow
// header).
func noRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{header: http.Header{}}
	mux.ServeHTTP(rec, r)
	if allow := rec.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	writeJSON(w, rec.status, map[string]string{"error": fmt.Sprintf("no route %s %s (%s)", r.Method, r.URL.Path, http.StatusText(rec.status))})
}

// withIdempotencyKey carries the request's Idempotency-Key, if any, in
// its context to the engine: the replicated mode de-duplicates a retried
// request with it.
func withIdempotencyKey(r *http.Request) context.Context {
	return replica.WithIdempotencyKey(r.Context(), r.Header.Get("Idempotency-Key"))
}

// contribute is POST /v1/contributions.
func (s *routes) contribute(w http.ResponseWriter, r *http.Request, p principal) {
	if s.hc.access.key != nil {
		if err := require(p, authtoken.Contributor, "contributing"); err != nil {
			writeError(w, err)
			return
		}
	}
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-r.Context().Done():
		return
	}
	c, err := readContribution(w, r, s.hc.maxBody)
	if err != nil {
		writeError(w, err)
		return
	}
	if c.Vector == nil {
		writeError(w, badRequest("missing \"vector\""))
		return
	}
	if p.role == authtoken.Contributor {
		// A contributor contributes under its own id only; the body may
		// leave the id out.
		if c.Contributor == "" {
			c.Contributor = p.id
		} else if c.Contributor != p.id {
			writeError(w, httpError{status: http.StatusForbidden, msg: "this credential is bound to another contributor id"})
			return
		}
	}
	step, err := s.agg.Add(withIdempotencyKey(r), c.Contributor, c.Vector)
	// The replicated mode's answer when the log has the contribution but
	// the aggregator's decision did not arrive in time: acknowledged
	// (202) and applied in log order.
	var lg *replica.LoggedError
	if errors.As(err, &lg) {
		writeJSON(w, http.StatusAccepted, map[string]any{"sequence": lg.Sequence, "status": "logged: the aggregator applies it in log order"})
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"step": step})
}

// commit is POST /v1/commit.
func (s *routes) commit(w http.ResponseWriter, r *http.Request, p principal) {
	if err := require(p, authtoken.Operator, "committing"); err != nil {
		writeError(w, err)
		return
	}
	rel, err := s.agg.Commit(withIdempotencyKey(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(rel))
}

// release is GET /v1/releases/{t}.
func (s *routes) release(w http.ResponseWriter, r *http.Request, p principal) {
	t, err := strconv.Atoi(r.PathValue("t"))
	if errors.Is(err, strconv.ErrRange) {
		writeError(w, httpError{status: http.StatusNotFound, msg: fmt.Sprintf("step %s: no such release (steps are below 2^63)", r.PathValue("t"))})
		return
	}
	if err != nil || t < 1 {
		writeError(w, badRequest(fmt.Sprintf("step %q: want a positive integer", r.PathValue("t"))))
		return
	}
	rel, err := s.agg.Release(t)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(rel))
}

// releases is GET /v1/releases?from=T&limit=N.
func (s *routes) releases(w http.ResponseWriter, r *http.Request, p principal) {
	from, limit, err := pageParams(r, s.maxPage)
	if err != nil {
		writeError(w, err)
		return
	}
	steps := s.agg.Ledger().Steps
	page := releasePage{Releases: []releaseJSON{}, Steps: steps}
	for t := from; t <= steps && t < from+limit; t++ {
		rel, err := s.agg.Release(t)
		if err != nil {
			writeError(w, err)
			return
		}
		page.Releases = append(page.Releases, toJSON(rel))
	}
	if next := from + limit; next <= steps {
		page.NextFrom = next
	}
	writeJSON(w, http.StatusOK, page)
}

// ledger is GET /v1/ledger.
func (s *routes) ledger(w http.ResponseWriter, r *http.Request, p principal) {
	v, err := ledgerView(s.agg.Ledger(), p)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// config is GET /v1/config.
func (s *routes) config(w http.ResponseWriter, r *http.Request, p principal) {
	if err := require(p, authtoken.Operator, "reading the configuration"); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.hc.config)
}

// releasePage is a page of GET /v1/releases: releases from..from+limit-1
// that exist, the number of releases made, and where the next page
// starts (absent on the last page).
type releasePage struct {
	Releases []releaseJSON `json:"releases"`
	Steps    int           `json:"steps"`
	NextFrom int           `json:"next_from,omitempty"`
}

// pageParams reads ?from=T&limit=N (defaults 1 and min(100, maxPage)).
func pageParams(r *http.Request, maxPage int) (from, limit int, err error) {
	from, limit = 1, min(100, maxPage)
	q := r.URL.Query()
	for k, v := range q {
		if k != "from" && k != "limit" {
			return 0, 0, badRequest(fmt.Sprintf("unknown parameter %q (known: from, limit)", k))
		}
		if len(v) > 1 {
			return 0, 0, badRequest(fmt.Sprintf("parameter %q given %d times: give it once", k, len(v)))
		}
	}
	if s := q.Get("from"); s != "" {
		if from, err = strconv.Atoi(s); err != nil || from < 1 {
			return 0, 0, badRequest(fmt.Sprintf("from=%q: want a positive step", s))
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxPage {
			return 0, 0, badRequest(fmt.Sprintf("limit=%q: want an integer in 1..%d", s, maxPage))
		}
	}
	return from, limit, nil
}

// statusRecorder captures the status of the mux's own 404 and 405 answers.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header         { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusRecorder) WriteHeader(code int)        { s.status = code }

type httpError struct {
	status     int
	msg        string
	retryAfter int // seconds, for 429
}

func (e httpError) Error() string { return e.msg }

func badRequest(msg string) error { return httpError{status: http.StatusBadRequest, msg: msg} }

// readContribution reads a body of at most maxBody bytes and decodes it.
func readContribution(w http.ResponseWriter, r *http.Request, maxBody int64) (contribution, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return contribution{}, httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body over %d bytes", mbe.Limit)}
		}
		return contribution{}, badRequest("reading the body: " + err.Error())
	}
	c, err := decodeContribution(body)
	if err != nil {
		return c, badRequest("bad JSON: " + err.Error())
	}
	return c, nil
}

func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var he httpError
	switch {
	case errors.As(err, &he):
		status = he.status
		switch status {
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="dpserve"`)
		case http.StatusTooManyRequests:
			w.Header().Set("Retry-After", strconv.Itoa(max(1, he.retryAfter)))
		}
	case errors.Is(err, aggregate.ErrDimension), errors.Is(err, aggregate.ErrNotFinite), errors.Is(err, aggregate.ErrContributor):
		status = http.StatusBadRequest
	case errors.Is(err, aggregate.ErrParticipationLimit), errors.Is(err, aggregate.ErrSeparation):
		status = http.StatusConflict
	case errors.Is(err, aggregate.ErrBudgetExhausted):
		status = http.StatusForbidden
	case errors.Is(err, aggregate.ErrNotReleased):
		status = http.StatusNotFound
	case errors.Is(err, replica.ErrUnavailable):
		// The replicated cluster did not answer in time: retry.
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, aggregate.ErrClosed):
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
