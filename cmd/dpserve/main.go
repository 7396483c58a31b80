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
//	    [-tls-cert cert.pem -tls-key key.pem] [-auth-key auth.key [-rate 10] [-burst 20]]
//	dpserve -nats tls://n1:4222,tls://n2:4222,tls://n3:4222 -nats-creds FILE [-nats-ca ca.pem] [-service dpserve] [-replicas 3]
//	    [-aggregator=true] [-lease-ttl 2s] -dim 100 ... (the same flags, no -store)
//	dpserve key -out auth.key
//	dpserve token -key auth.key -contributor ID [-ttl 24h] | -role operator
//	dpserve cert -dir D         (testing only: a certificate for -tls-cert)
//	dpserve cluster -dir D      (testing only: NATS with JetStream on loopback)
//	dpserve -version
//
// API (JSON; errors are 4xx/5xx with {"error": "..."}):
//
//	POST /v1/contributions  {"contributor": "id", "vector": [..d..]} -> 200 {"step": t} once durable
//	POST /v1/commit         -> 200 {"step": t, "release": [..d..] (, "count": c, "mean": [..])}
//	GET  /v1/releases/{t}   -> the same object as the commit that made it
//	GET  /v1/releases?from=T&limit=N -> {"releases": [..], "steps": S, "next_from": T'}
//	GET  /v1/ledger         -> epsilon_spent, epsilon_budget, delta, steps, contributions_accepted, ...
//	GET  /v1/config         -> the flags in force (operator)
//	GET  /healthz           -> {"status": "ok"}
//
// Without -auth-key (the default, loopback only) every caller is the
// operator. With it, contributing needs a contributor token bound to the
// id (Authorization: Bearer TOKEN), committing, /v1/config and the
// ledger's exact counters an operator token; releases and the rest of the
// ledger are public. A non-loopback -addr is refused unless TLS and
// -auth-key are both given. docs/dpserve.md is the reference.
//
// It prints "dpserve: listening on HOST:PORT" once it accepts connections,
// and on SIGTERM or SIGINT stops accepting, finishes the requests in flight
// and closes the store. With -nats instead of -store the service runs
// replicated on a NATS JetStream cluster (package aggregate/replica; same
// API): any number of front-ends, one aggregator at a time. -seed HEX (64
// hex digits) fixes the noise for tests: the ledger then states that the
// releases are not private. Input the user
// can fix (flags, -addr, the files named, a store made with other flags or
// corrupt) exits with status 2 and a one-line message; internal failures
// with 1.
package main

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/aggregate/replica"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/authtoken"
	"github.com/dpmf-go/dpmf/internal/buildinfo"
	"github.com/dpmf-go/dpmf/internal/natsconn"
	"github.com/dpmf-go/dpmf/privacy"
	bolt "go.etcd.io/bbolt"
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
	var err error
	switch {
	case len(args) > 0 && args[0] == "token":
		err = tokenCmd(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "key":
		err = keyCmd(args[1:], stderr)
	case len(args) > 0 && args[0] == "cert":
		err = certCmd(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "cluster":
		err = clusterCmd(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "version":
		fmt.Fprintln(stdout, "dpserve "+buildinfo.Read().String())
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		err = usagef("unknown command %q: want key, token or version, or the service's flags (dpserve -h lists them)", args[0])
	default:
		err = serve(ctx, args, stdout, stderr)
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "dpserve: "+strings.ReplaceAll(err.Error(), "\n", " "))
	return exitStatus(err)
}

// exitStatus is 2 for what the user can fix by changing the command line
// or the files it names (flags, -addr, a store made with other flags, a
// corrupt or locked store, key and certificate files), 1 for internal
// failures.
func exitStatus(err error) int {
	var ue usageError
	var refused *privacy.Refusal
	switch {
	case errors.As(err, &ue), errors.As(err, &refused), errors.Is(err, dpcore.ErrInvalid),
		errors.Is(err, aggregate.ErrStoreMismatch), errors.Is(err, aggregate.ErrStoreCorrupt),
		errors.Is(err, bolt.ErrTimeout), errors.Is(err, fs.ErrPermission):
		return 2
	}
	return 1
}

type options struct {
	addr, store, mechanism, workload, seed string
	tlsCert, tlsKey, authKey               string
	rate                                   float64
	burst                                  int
	version                                bool
	dim, horizon, k, b, maxBatch, inflight int
	epsilon, delta, clip                   float64
	count                                  bool
	commitEvery                            time.Duration
	maxBody, noiseMemory                   int64
	// Replicated mode (-nats).
	nats, service, workDir string
	natsCreds, natsCA      string
	natsCert, natsKey      string
	aggregator             bool
	replicas               int
	leaseTTL, logMaxAge    time.Duration
}

// commandsUsage is the head of dpserve -h: the commands besides serving.
const commandsUsage = `Usage of dpserve:
  dpserve -store FILE -dim D ... [flags]   serve on one node (flags below)
  dpserve -nats URL,... -dim D ... [flags] serve replicated on a NATS JetStream cluster
  dpserve key -out FILE                    write a fresh key for -auth-key
  dpserve token -key FILE ...              mint a contributor or operator token (dpserve token -h)
  dpserve version                          module version and commit (also dpserve -version)
Flags of the service:
`

// parseCommandFlags parses args into fs with the error as one line (the
// flag package would print it and the whole usage); -h prints head, if
// any, and the flags.
func parseCommandFlags(fs *flag.FlagSet, args []string, head string, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, head)
		fs.PrintDefaults()
		return err
	}
	if err != nil {
		return usagef("%v (%s -h lists the flags)", err, fs.Name())
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("dpserve", flag.ContinueOnError)
	o.register(fs)
	if err := parseCommandFlags(fs, args, commandsUsage, stderr); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usagef("unexpected argument %q (the commands are key, token and version; dpserve -h lists them and the flags)", fs.Arg(0))
	}
	if o.version {
		return o, nil
	}
	if err := o.check(); err != nil {
		return o, err
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

// register defines the flags of dpserve on fs.
func (o *options) register(fs *flag.FlagSet) {
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
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with, TLS 1.2 or later (with -tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&o.authKey, "auth-key", "", "key file (dpserve key): requests then need tokens (dpserve token) for contributing and operating")
	fs.Float64Var(&o.rate, "rate", 10, "requests a second allowed to each contributor credential (0: no limit; with -auth-key)")
	fs.IntVar(&o.burst, "burst", 20, "requests a contributor credential may send at once before -rate applies")
	fs.StringVar(&o.nats, "nats", "", "NATS URL,... : replicated mode on a JetStream cluster instead of -store (docs/dpserve.md)")
	fs.StringVar(&o.service, "service", "dpserve", "replicated mode: name of the service's stream and buckets (letters, digits, - and _)")
	fs.BoolVar(&o.aggregator, "aggregator", true, "replicated mode: also stand for election as the one aggregator")
	fs.IntVar(&o.replicas, "replicas", 3, "replicated mode: JetStream replicas of the log, releases and snapshots")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "replicated mode: the aggregator's lease; a standby takes over at most this long after the leader stops renewing")
	fs.DurationVar(&o.logMaxAge, "log-max-age", 0, "replicated mode: drop logged contributions older than this (0: keep them; at least 1h, and far above the longest time between two commits)")
	fs.StringVar(&o.natsCreds, "nats-creds", "", "replicated mode: NATS credentials file (JWT and NKey) of this node")
	fs.StringVar(&o.natsCA, "nats-ca", "", "replicated mode: PEM CA certificates that sign the NATS servers' TLS certificates")
	fs.StringVar(&o.natsCert, "nats-cert", "", "replicated mode: PEM client certificate for NATS mutual TLS (with -nats-key)")
	fs.StringVar(&o.natsKey, "nats-key", "", "replicated mode: PEM private key of -nats-cert")
	fs.StringVar(&o.workDir, "work-dir", "", "replicated mode: directory for the aggregator's local cache (default: the system's temporary directory)")
	fs.BoolVar(&o.version, "version", false, "print the module version and commit, and exit")
}

// check refuses flags that cannot run, with the one-line reason.
func (o *options) check() error {
	switch {
	case o.store == "" && o.nats == "":
		return usagef("-store FILE (single node) or -nats URL,... (replicated) is required")
	case o.store != "" && o.nats != "":
		return usagef("-store and -nats exclude each other: -store FILE is the single-node mode, -nats URL,... the replicated one")
	case o.nats != "" && !replica.ValidService(o.service):
		return usagef("-service %q: want 1..64 letters, digits, - and _", o.service)
	case o.nats != "" && (o.replicas < 1 || o.replicas > replica.MaxReplicas || o.leaseTTL < replica.MinLeaseTTL):
		return usagef("-replicas %d -lease-ttl %v: want 1..%d replicas and a lease of at least %v", o.replicas, o.leaseTTL, replica.MaxReplicas, replica.MinLeaseTTL)
	case (o.natsCert == "") != (o.natsKey == ""):
		return usagef("-nats-cert and -nats-key go together")
	case o.nats != "" && !o.natsSecurity().Authenticates(o.nats):
		return usagef("-nats needs credentials (-nats-creds, -nats-cert and -nats-key, or user:password@ or token@ in every URL): the log holds the raw contributions and the snapshots the noise state, which predicts future noise")
	case o.logMaxAge != 0 && o.logMaxAge < time.Hour:
		return usagef("-log-max-age %v: want 0 (keep) or at least 1h", o.logMaxAge)
	case o.dim < 1:
		return usagef("-dim %d: want a positive dimension", o.dim)
	case o.horizon < 1:
		return usagef("-horizon %d: want a positive number of releases", o.horizon)
	case !(o.epsilon > 0):
		return usagef("-epsilon %v: want a positive budget", o.epsilon)
	case !(o.delta > 0 && o.delta < 1):
		return usagef("-delta %v: want a value in (0,1)", o.delta)
	case !(o.clip > 0):
		return usagef("-clip %v: want a positive clip norm", o.clip)
	case o.k < 1 || o.b < 1:
		return usagef("-k %d -b %d: both must be at least 1", o.k, o.b)
	case o.commitEvery < 0:
		return usagef("-commit-every %v: want a non-negative interval", o.commitEvery)
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return usagef("-tls-cert and -tls-key go together")
	case !(o.rate >= 0) || math.IsInf(o.rate, 0) || o.burst < 1:
		return usagef("-rate %v -burst %d: want a finite rate >= 0 and a burst >= 1", o.rate, o.burst)
	case o.maxBody < 0 || o.maxBatch < 1 || o.inflight < 0 || o.noiseMemory < 1:
		return usagef("-max-body %d -max-batch %d -max-inflight %d -noise-memory %d: want >= 0, >= 1, >= 0, >= 1", o.maxBody, o.maxBatch, o.inflight, o.noiseMemory)
	}
	if o.nats != "" && o.workDir != "" {
		return checkWorkDir(o.workDir)
	}
	return nil
}

// checkWorkDir refuses a -work-dir that is not a directory this process
// can create its cache in, at start: an aggregator elected later would
// fail on it at every lease it won.
func checkWorkDir(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return usagef("-work-dir %s: not an existing directory", dir)
	}
	d, err := os.MkdirTemp(dir, ".dpserve-check-")
	if err != nil {
		return usagef("-work-dir %s: cannot create the aggregator's cache there: %v", dir, err)
	}
	os.Remove(d)
	return nil
}

// natsSecurity is the replicated mode's NATS credentials.
func (o *options) natsSecurity() natsconn.Security {
	return natsconn.Security{Creds: o.natsCreds, CA: o.natsCA, Cert: o.natsCert, Key: o.natsKey}
}

func openAggregator(ctx context.Context, o options) (*aggregate.Aggregator, error) {
	spec, wl, w, schema, err := releaseFlags(o)
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
	cfg, err := aggregateConfig(o, wl, mech)
	if err != nil {
		return nil, err
	}
	return aggregate.Open(ctx, o.store, cfg)
}

// releaseFlags parses the flags that determine the releases.
func releaseFlags(o options) (privacy.Mechanism, aggregate.Workload, dpcore.Workload, dpcore.Schema, error) {
	spec, err := privacy.ParseMechanism(o.mechanism)
	if err != nil {
		return spec, aggregate.Workload{}, dpcore.Workload{}, dpcore.Schema{}, usageError{"-mechanism: " + err.Error()}
	}
	wl, err := aggregate.ParseWorkload(o.workload)
	if err != nil {
		return spec, wl, dpcore.Workload{}, dpcore.Schema{}, usageError{"-workload: " + err.Error()}
	}
	w, err := wl.MechanismWorkload(o.horizon)
	if err != nil {
		return spec, wl, w, dpcore.Schema{}, err
	}
	schema, err := privacy.Participation{K: o.k, B: o.b}.Schema()
	return spec, wl, w, schema, err
}

// aggregateConfig is the engine's configuration under the flags, with the
// mechanism mech.
func aggregateConfig(o options, wl aggregate.Workload, mech aggregate.NamedStrategy) (aggregate.Config, error) {
	var seed *dpcore.Seed
	if o.seed != "" {
		b, err := hex.DecodeString(o.seed)
		var ok bool
		if seed, ok = dpcore.SeedOf(b); err != nil || !ok {
			return aggregate.Config{}, usagef("-seed: want 64 hex digits (32 bytes)")
		}
	}
	return aggregate.Config{
		Dim: o.dim, Workload: wl, Mechanism: mech, Epsilon: o.epsilon, Delta: o.delta,
		Clip: o.clip, K: o.k, B: o.b, Count: o.count, Seed: seed, MaxBatch: o.maxBatch, NoiseMemory: o.noiseMemory,
	}, nil
}

// checkRelease builds the mechanism the flags name and checks the whole
// configuration as opening a store would (the planner's calibration, the
// scales of the exact arithmetic), without a store: the replicated mode
// refuses a configuration at start rather than when a node first leads.
// The configuration returned holds the mechanism, for that node's
// aggregator.
func checkRelease(ctx context.Context, o options) (aggregate.Config, error) {
	spec, wl, w, schema, err := releaseFlags(o)
	if err != nil {
		return aggregate.Config{}, err
	}
	mech, err := aggregate.BuildMechanism(ctx, spec, w, schema)
	if err != nil {
		return aggregate.Config{}, err
	}
	cfg, err := aggregateConfig(o, wl, mech)
	if err != nil {
		return aggregate.Config{}, err
	}
	if err := aggregate.CheckConfig(cfg); err != nil {
		return aggregate.Config{}, err
	}
	return cfg, nil
}

// listener checks the access policy and binds -addr: a non-loopback
// address is refused unless both TLS and credentials are configured.
func listener(o options, tlsOn, authOn bool) (net.Listener, error) {
	addr, err := net.ResolveTCPAddr("tcp", o.addr)
	if err != nil {
		return nil, usagef("-addr %s: %v", o.addr, err)
	}
	if !(addr.IP != nil && addr.IP.IsLoopback()) && !(tlsOn && authOn) {
		return nil, usagef("-addr %s is not a loopback address: serving beyond this machine needs -tls-cert, -tls-key and -auth-key", o.addr)
	}
	ln, err := net.ListenTCP("tcp", addr)
	if err != nil {
		return nil, usagef("-addr %s: %v", o.addr, err)
	}
	return ln, nil
}

// setupAccess loads the TLS certificate and the token key the flags name.
func setupAccess(o options) (*tls.Config, access, error) {
	var tlsCfg *tls.Config
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, access{}, usagef("-tls-cert %s -tls-key %s: %v", o.tlsCert, o.tlsKey, err)
		}
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	acc := access{now: time.Now}
	if o.authKey != "" {
		k, err := authtoken.LoadKey(o.authKey)
		if err != nil {
			return nil, access{}, usagef("-auth-key: %v", err)
		}
		acc.key = &k
		if o.rate > 0 {
			acc.limiter = newLimiter(o.rate, o.burst)
		}
	}
	return tlsCfg, acc, nil
}

// restoreHint is added to a corrupt store's error.
const restoreHint = "it cannot be repaired in place: stop dpserve and restore the file from a copy made while dpserve was stopped after its last release " +
	"(an older copy would make releases again with noise already used, which voids the guarantee), or move it aside and start a new store, which is a new privacy budget"

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		fmt.Fprintln(stdout, "dpserve "+buildinfo.Read().String())
		return nil
	}
	tlsCfg, acc, err := setupAccess(o)
	if err != nil {
		return err
	}
	if o.nats != "" {
		return serveReplicated(ctx, o, tlsCfg, acc, stdout, stderr)
	}
	if err := checkStorePath(o.store); err != nil {
		return err
	}
	ln, err := listener(o, tlsCfg != nil, acc.key != nil)
	if err != nil {
		return err
	}
	defer ln.Close()
	agg, err := openStore(ctx, o)
	if err != nil {
		return err
	}
	defer agg.Close()
	hc := handlerConfig{maxBody: o.maxBody, inflight: o.inflight, access: acc, config: configView(o, ln.Addr().String(), tlsCfg != nil, acc.key != nil)}
	srv := &http.Server{
		Handler:           newHandler(agg, hc),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	srv.ErrorLog = connLog()
	if o.seed != "" {
		fmt.Fprintln(stderr, "dpserve: WARNING: -seed fixes the noise; releases are not private (tests only)")
	}
	if acc.key == nil {
		fmt.Fprintln(stderr, "dpserve: no -auth-key: every caller that reaches this loopback port acts as the operator")
	}
	fmt.Fprintf(stdout, "dpserve: listening on %s\n", ln.Addr())
	return runServer(ctx, srv, ln, agg, o, stdout, stderr)
}

// connLog is the http.Server's error log: discarded. The server logs no
// request (docs/dpserve.md), and net/http would log every failed TLS
// handshake or broken connection with the caller's address.
func connLog() *log.Logger { return log.New(io.Discard, "", 0) }

// checkStorePath refuses a -store whose directory does not exist or that
// is a directory.
func checkStorePath(store string) error {
	if fi, err := os.Stat(filepath.Dir(store)); err != nil || !fi.IsDir() {
		return usagef("-store %s: directory %s does not exist", store, filepath.Dir(store))
	}
	if fi, err := os.Stat(store); err == nil && fi.IsDir() {
		return usagef("-store %s is a directory, want a file", store)
	}
	return nil
}

// openStore checks the store's format and opens the aggregator on it; a
// corrupt store's error says how to restore it.
func openStore(ctx context.Context, o options) (*aggregate.Aggregator, error) {
	if err := aggregate.CheckStore(o.store); err != nil {
		if !errors.Is(err, aggregate.ErrStoreCorrupt) {
			return nil, err // locked, unreadable: the file is fine
		}
		return nil, fmt.Errorf("%w; %s", err, restoreHint)
	}
	agg, err := openAggregator(ctx, o)
	if errors.Is(err, aggregate.ErrStoreCorrupt) {
		return nil, fmt.Errorf("store %s: %w; %s", o.store, err, restoreHint)
	}
	return agg, err
}

// configView is GET /v1/config: the flags in force.
func configView(o options, addr string, tlsOn, authOn bool) map[string]any {
	return map[string]any{
		"addr": addr, "tls": tlsOn, "credentials": authOn,
		"rate_per_contributor": o.rate, "burst": o.burst, "store": o.store, "dim": o.dim, "mechanism": o.mechanism,
		"workload": o.workload, "horizon": o.horizon, "epsilon": o.epsilon, "delta": o.delta, "clip": o.clip,
		"k": o.k, "b": o.b, "count": o.count, "seeded": o.seed != "", "commit_every_seconds": o.commitEvery.Seconds(),
		"max_batch": o.maxBatch, "max_body": o.maxBody, "max_inflight": o.inflight, "noise_memory": o.noiseMemory,
		"version": buildinfo.Read().String(),
	}
}

// runServer serves until ctx ends (SIGTERM or SIGINT), committing every
// -commit-every, then stops accepting, finishes the requests in flight and
// closes the store.
func runServer(ctx context.Context, srv *http.Server, ln net.Listener, agg *aggregate.Aggregator, o options, stdout, stderr io.Writer) error {
	errc := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
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

// keyCmd writes a fresh signing key: dpserve key -out FILE.
func keyCmd(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("dpserve key", flag.ContinueOnError)
	out := fs.String("out", "", "file to create with a fresh 32-byte key (mode 0600; never overwritten)")
	if err := parseCommandFlags(fs, args, "Usage of dpserve key:\n", stderr); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return usagef("usage: dpserve key -out FILE")
	}
	if err := authtoken.WriteKeyFile(*out); err != nil {
		return usagef("key: %v", err)
	}
	return nil
}

// tokenCmd mints a token: dpserve token -key FILE -role contributor
// -contributor ID [-ttl D], or -role operator. The token goes to standard
// output and nowhere else.
func tokenCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dpserve token", flag.ContinueOnError)
	keyFile := fs.String("key", "", "key file the server's -auth-key names")
	role := fs.String("role", "contributor", "contributor or operator")
	id := fs.String("contributor", "", "contributor id the token is bound to (role contributor)")
	ttl := fs.Duration("ttl", 24*time.Hour, "validity from now")
	if err := parseCommandFlags(fs, args, "Usage of dpserve token:\n", stderr); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usagef("token: unexpected argument %q", fs.Arg(0))
	case *keyFile == "":
		return usagef("token: -key FILE is required")
	case *ttl <= 0:
		return usagef("token: -ttl %v: want a positive duration", *ttl)
	case *role == string(authtoken.Contributor) && *id == "":
		return usagef("token: -contributor ID is required for a contributor token")
	case *role == string(authtoken.Operator) && *id != "":
		return usagef("token: an operator token takes no -contributor")
	}
	r, err := authtoken.ParseRole(*role)
	if err != nil {
		return usagef("token: -role: %v", err)
	}
	k, err := authtoken.LoadKey(*keyFile)
	if err != nil {
		return usagef("token: %v", err)
	}
	tok, err := k.Mint(authtoken.Claims{Role: r, Subject: *id, Expires: time.Now().Add(*ttl).Unix()})
	if err != nil {
		return usagef("token: %v", err)
	}
	fmt.Fprintln(stdout, tok)
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
