package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/dpmf-go/dpmf/aggregate"
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

// newHandler serves the API; at most inflight contributions are read and
// decoded at once (the others wait), which bounds their memory.
func newHandler(agg *aggregate.Aggregator, maxBody int64, inflight int) http.Handler {
	mux := http.NewServeMux()
	sem := make(chan struct{}, inflight)
	mux.HandleFunc("POST /v1/contributions", func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		case <-r.Context().Done():
			return
		}
		c, err := readContribution(w, r, maxBody)
		if err != nil {
			writeError(w, err)
			return
		}
		if c.Vector == nil {
			writeError(w, badRequest("missing \"vector\""))
			return
		}
		step, err := agg.Add(r.Context(), c.Contributor, c.Vector)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"step": step})
	})
	mux.HandleFunc("POST /v1/commit", func(w http.ResponseWriter, r *http.Request) {
		rel, err := agg.Commit(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, toJSON(rel))
	})
	mux.HandleFunc("GET /v1/releases/{t}", func(w http.ResponseWriter, r *http.Request) {
		t, err := strconv.Atoi(r.PathValue("t"))
		if err != nil || t < 1 {
			writeError(w, badRequest(fmt.Sprintf("step %q: want a positive integer", r.PathValue("t"))))
			return
		}
		rel, err := agg.Release(t)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, toJSON(rel))
	})
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, agg.Ledger())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "steps": agg.Ledger().Steps})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No route: the mux answers 404 or 405 in plain text; answer
		// JSON with the same status (and Allow header).
		rec := &statusRecorder{header: http.Header{}}
		mux.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeJSON(w, rec.status, map[string]string{"error": fmt.Sprintf("no route %s %s (%s)", r.Method, r.URL.Path, http.StatusText(rec.status))})
	})
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
	status int
	msg    string
}

func (e httpError) Error() string { return e.msg }

func badRequest(msg string) error { return httpError{http.StatusBadRequest, msg} }

// readContribution reads a body of at most maxBody bytes and decodes it.
func readContribution(w http.ResponseWriter, r *http.Request, maxBody int64) (contribution, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return contribution{}, httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit)}
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
	case errors.Is(err, aggregate.ErrDimension), errors.Is(err, aggregate.ErrNotFinite), errors.Is(err, aggregate.ErrContributor):
		status = http.StatusBadRequest
	case errors.Is(err, aggregate.ErrParticipationLimit), errors.Is(err, aggregate.ErrSeparation):
		status = http.StatusConflict
	case errors.Is(err, aggregate.ErrBudgetExhausted):
		status = http.StatusForbidden
	case errors.Is(err, aggregate.ErrNotReleased):
		status = http.StatusNotFound
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
