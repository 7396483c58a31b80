// Command dpserve is an HTTP service releasing private running sums of
// vectors: contributions arrive concurrently, every commit closes a step and
// releases the step's private prefix sum (or momentum-weighted or windowed
// sum) with the correlated noise of a matrix-factorization mechanism, and
// everything is durable in one bbolt file (package aggregate).
//
// Usage:
//
//	dpserve -store sums.db -dim 100 -mechanism tree-online -epsilon 1 -delta 1e-6 \
//	    -horizon 1024 -clip 1 -k 4 -b 128 [-addr 127.0.0.1:8377] [-workload prefix] [-count] [-commit-every 1m]
//
// API (JSON; errors are 4xx/5xx with {"error": "..."}):
//
//	POST /v1/contributions  {"contributor": "id", "vector": [..d..]} -> 200 {"step": t} once durable
//	POST /v1/commit         -> 200 {"step": t, "release": [..d..] (, "count": c, "mean": [..])}
//	GET  /v1/releases/{t}   -> the same object as the commit that made it
//	GET  /v1/ledger         -> epsilon_spent, epsilon_budget, delta, steps, contributions_accepted, ...
//	GET  /healthz           -> {"status": "ok"}
//
// It prints "dpserve: listening on HOST:PORT" once it accepts connections,
// and on SIGTERM or SIGINT stops accepting, finishes the requests in flight
// and closes the store. -seed HEX (64 hex digits) fixes the noise for tests:
// the ledger then states that the releases are not private. Invalid flags
// exit with status 2 and a one-line message.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/mfnoise"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := serve(ctx, args, stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "dpserve: "+strings.ReplaceAll(err.Error(), "\n", " "))
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, aggregate.ErrInvalidConfig) || errors.Is(err, mfnoise.ErrInvalid) {
		return 2
	}
	return 1
}

type options struct {
	addr, store, mechanism, workload, seed string
	dim, horizon, k, b, maxBatch, inflight int
	epsilon, delta, clip                   float64
	count                                  bool
	commitEvery                            time.Duration
	maxBody, noiseMemory                   int64
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("dpserve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8377", "listen address HOST:PORT (port 0 picks a free one)")
	fs.StringVar(&o.store, "store", "", "bbolt file holding all state (created if absent; reopened to resume)")
	fs.IntVar(&o.dim, "dim", 0, "dimension d of a contribution vector")
	fs.StringVar(&o.mechanism, "mechanism", "tree-online", "noise mechanism with a causal decoder: dpsgd, tree-online, mf-single, bandmf:BANDS, blt:NBUF, ... (as train compare; tree-full, fft, fft-opt are refused)")
	fs.StringVar(&o.workload, "workload", "prefix", "release: prefix, momentum:BETA or window:W")
	fs.Float64Var(&o.epsilon, "epsilon", 0, "privacy budget epsilon over the whole horizon")
	fs.Float64Var(&o.delta, "delta", 0, "privacy parameter delta")
	fs.IntVar(&o.horizon, "horizon", 0, "number of releases the budget covers")
	fs.Float64Var(&o.clip, "clip", 0, "L2 clip norm zeta of one contribution")
	fs.IntVar(&o.k, "k", 1, "participations allowed per contributor")
	fs.IntVar(&o.b, "b", 1, "minimum steps between two participations of a contributor")
	fs.BoolVar(&o.count, "count", false, "also release a count and a mean (the record norm becomes clip*sqrt(2))")
	fs.StringVar(&o.seed, "seed", "", "64 hex digits: fixed noise seed, FOR TESTS ONLY (releases are then not private)")
	fs.DurationVar(&o.commitEvery, "commit-every", 0, "also commit a step at this interval (0: only on POST /v1/commit)")
	fs.IntVar(&o.maxBatch, "max-batch", 4096, "most contributions made durable by one transaction")
	fs.Int64Var(&o.maxBody, "max-body", 0, "request body limit in bytes (0: 1 KiB + 32 bytes per dimension)")
	fs.IntVar(&o.inflight, "max-inflight", 0, "contributions decoded at once; more wait (0: as many as fit in 1 GiB, 4..1024)")
	fs.Int64Var(&o.noiseMemory, "noise-memory", aggregate.DefaultNoiseMemory, "noise state budget in bytes (fixed for the life of the store)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case o.store == "":
		return o, usagef("-store FILE is required")
	case o.dim < 1:
		return o, usagef("-dim %d: want a positive dimension", o.dim)
	case o.horizon < 1:
		return o, usagef("-horizon %d: want a positive number of releases", o.horizon)
	case !(o.epsilon > 0):
		return o, usagef("-epsilon %v: want a positive budget", o.epsilon)
	case !(o.delta > 0 && o.delta < 1):
		return o, usagef("-delta %v: want a value in (0,1)", o.delta)
	case !(o.clip > 0):
		return o, usagef("-clip %v: want a positive clip norm", o.clip)
	case o.k < 1 || o.b < 1:
		return o, usagef("-k %d -b %d: both must be at least 1", o.k, o.b)
	case o.commitEvery < 0:
		return o, usagef("-commit-every %v: want a non-negative interval", o.commitEvery)
	case o.maxBody < 0 || o.maxBatch < 1 || o.inflight < 0 || o.noiseMemory < 1:
		return o, usagef("-max-body %d -max-batch %d -max-inflight %d -noise-memory %d: want >= 0, >= 1, >= 0, >= 1", o.maxBody, o.maxBatch, o.inflight, o.noiseMemory)
	}
	if o.inflight == 0 {
		// A contribution in flight holds its body (up to 32 d bytes) and
		// its vector and clipped copy (16 d bytes).
		o.inflight = int(max(4, min(1024, (1<<30)/(48*int64(o.dim)))))
	}
	if o.maxBody == 0 {
		o.maxBody = 1024 + 32*int64(o.dim)
	}
	return o, nil
}

func openAggregator(ctx context.Context, o options) (*aggregate.Aggregator, error) {
	spec, err := mfnoise.ParseMechanism(o.mechanism)
	if err != nil {
		return nil, usageError{"-mechanism: " + err.Error()}
	}
	wl, err := aggregate.ParseWorkload(o.workload)
	if err != nil {
		return nil, usageError{"-workload: " + err.Error()}
	}
	var seed []byte
	if o.seed != "" {
		if seed, err = hex.DecodeString(o.seed); err != nil || len(seed) != 32 {
			return nil, usagef("-seed: want 64 hex digits (32 bytes)")
		}
	}
	w, err := wl.MechanismWorkload(o.horizon)
	if err != nil {
		return nil, err
	}
	schema, err := aggregate.Schema(o.k, o.b)
	if err != nil {
		return nil, err
	}
	// A store made before holds its mechanism: reuse it (the encoder its
	// noise state was made with) rather than build it again.
	mech, err := aggregate.StoredMechanism(o.store, schema)
	if err != nil {
		return nil, err
	}
	switch {
	case mech == nil:
		if mech, err = aggregate.BuildMechanism(ctx, spec, w, schema); err != nil {
			return nil, err
		}
	case mech.Name() != spec.String():
		return nil, fmt.Errorf("%w: -mechanism %s, but the store was created with %s", aggregate.ErrStoreMismatch, spec, mech.Name())
	case mech.Workload().String() != w.String():
		return nil, fmt.Errorf("%w: -horizon %d -workload %s, but the store was created for %s", aggregate.ErrStoreMismatch, o.horizon, wl, mech.Workload())
	}
	return aggregate.Open(ctx, o.store, aggregate.Config{
		Dim: o.dim, Workload: wl, Mechanism: mech, Epsilon: o.epsilon, Delta: o.delta,
		Clip: o.clip, K: o.k, B: o.b, Count: o.count, Seed: seed, MaxBatch: o.maxBatch, NoiseMemory: o.noiseMemory,
	})
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	agg, err := openAggregator(ctx, o)
	if err != nil {
		return err
	}
	defer agg.Close()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.addr, err)
	}
	srv := &http.Server{
		Handler:           newHandler(agg, o.maxBody, o.inflight),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	if o.seed != "" {
		fmt.Fprintln(stderr, "dpserve: WARNING: -seed fixes the noise; releases are not private (tests only)")
	}
	fmt.Fprintf(stdout, "dpserve: listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if o.commitEvery > 0 {
		go ticker(ctx, agg, o.commitEvery, stderr)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := agg.Close(); err != nil {
		return fmt.Errorf("closing store: %w", err)
	}
	fmt.Fprintln(stdout, "dpserve: stopped")
	return nil
}

// ticker commits a step every interval until ctx ends or the budget is
// spent.
func ticker(ctx context.Context, agg *aggregate.Aggregator, every time.Duration, stderr io.Writer) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := agg.Commit(ctx); err != nil {
			if ctx.Err() == nil {
				fmt.Fprintln(stderr, "dpserve: periodic commit stopped: "+err.Error())
			}
			return
		}
	}
}
