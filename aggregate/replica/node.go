package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounds and defaults of a Config.
const (
	// MaxReplicas is the most replicas JetStream keeps of a stream.
	MaxReplicas = 5
	// DefaultReplicas survives the loss of one node of three.
	DefaultReplicas = 3
	// MinLeaseTTL is the shortest lease: it is renewed every fifth of it.
	MinLeaseTTL = 500 * time.Millisecond
	// DefaultLeaseTTL is the lease when Config.LeaseTTL is 0.
	DefaultLeaseTTL = 2 * time.Second
	// DefaultDecisionWait is Config.DecisionWait's default.
	DefaultDecisionWait = 2 * time.Second
)

// Config configures a Node. The zero values of the durations and of
// Replicas mean the defaults above.
type Config struct {
	// Service names the service's log and buckets on the cluster
	// (ValidService): <Service>_LOG, <Service>_state, <Service>_lease
	// and <Service>_snap.
	Service string
	// Aggregate is the engine an aggregator runs: its Mechanism built
	// once (a standby restoring a snapshot reuses the one stored with
	// it), its Seed nil for private releases. Every node of a service
	// must have the same release-determining fields: the cluster keeps
	// the first node's and New refuses others with
	// aggregate.ErrStoreMismatch. NoSync is set for the local cache.
	Aggregate aggregate.Config
	// Replicas is the JetStream replication of the log, the releases and
	// the snapshots, 1..MaxReplicas.
	Replicas int
	// LeaseTTL is the aggregator's lease: a standby takes over at most
	// about this long after the leader stopped renewing it.
	LeaseTTL time.Duration
	// LogMaxAge drops logged contributions older than this (0: keep
	// them); it must be far above the longest time between two commits.
	LogMaxAge time.Duration
	// CommitEvery makes the leading aggregator also commit a step at
	// this interval (0: only on Commit).
	CommitEvery time.Duration
	// WorkDir is the directory of the aggregator's local cache (empty:
	// the system's temporary directory).
	WorkDir string
	// ID names this node in the lease, the snapshots' names and the
	// logs (empty: NewID()).
	ID string
	// DecisionWait bounds how long Add waits for the aggregator's
	// decision on a logged contribution before it returns a *LoggedError.
	DecisionWait time.Duration
	// Logf reports the aggregator's transitions (lease won, lost,
	// errors); nil discards them.
	Logf func(format string, args ...any)
}

// ValidService reports whether name is a service name: 1..64 letters,
// digits, - and _.
func ValidService(name string) bool {
	if len(name) < 1 || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// NewID is a fresh node id: the host name, the process id and 12 random
// hex digits.
func NewID() string {
	idb := make([]byte, 6)
	rand.Read(idb)
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", strings.ReplaceAll(host, ".", "_"), os.Getpid(), hex.EncodeToString(idb))
}

// withDefaults is cfg with the defaults filled in, or the first field
// that cannot be used.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = DefaultReplicas
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.DecisionWait == 0 {
		cfg.DecisionWait = DefaultDecisionWait
	}
	if cfg.ID == "" {
		cfg.ID = NewID()
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	cfg.Aggregate.NoSync = true
	switch {
	case !ValidService(cfg.Service):
		return cfg, dpcore.Invalid("replica", "service %q: want 1..64 letters, digits, - and _", cfg.Service)
	case cfg.Replicas < 1 || cfg.Replicas > MaxReplicas:
		return cfg, dpcore.Invalid("replica", "%d replicas: want 1..%d", cfg.Replicas, MaxReplicas)
	case cfg.LeaseTTL < MinLeaseTTL:
		return cfg, dpcore.Invalid("replica", "lease %v: want at least %v", cfg.LeaseTTL, MinLeaseTTL)
	case cfg.LogMaxAge < 0 || cfg.CommitEvery < 0 || cfg.DecisionWait < 0:
		return cfg, dpcore.Invalid("replica", "log max age %v, commit interval %v, decision wait %v: want >= 0", cfg.LogMaxAge, cfg.CommitEvery, cfg.DecisionWait)
	}
	// Refused now rather than each time this node wins the lease.
	return cfg, aggregate.CheckConfig(cfg.Aggregate)
}

// horizon is the number of releases the budget covers.
func (cfg *Config) horizon() int { return cfg.Aggregate.Mechanism.Workload().N }

// fingerprint is what the cluster keeps of the release-determining
// configuration, in the form the first releases wrote it (the flags of
// dpserve; the seed's SHA-256 is that of its 64 lowercase hex digits).
func (cfg *Config) fingerprint() []byte {
	a := &cfg.Aggregate
	seed := ""
	if a.Seed != nil {
		h := sha256.Sum256([]byte(hex.EncodeToString(a.Seed[:])))
		seed = hex.EncodeToString(h[:])
	}
	noiseMemory := a.NoiseMemory
	if noiseMemory == 0 {
		noiseMemory = aggregate.DefaultNoiseMemory
	}
	fp, _ := json.Marshal(map[string]any{"dim": a.Dim, "mechanism": a.Mechanism.Name(), "workload": a.Workload.String(),
		"horizon": cfg.horizon(), "epsilon": a.Epsilon, "delta": a.Delta, "clip": a.Clip, "k": a.K, "b": a.B,
		"count": a.Count, "seed_sha256": seed, "noise_memory": noiseMemory})
	return fp
}

// Node is a front-end of the replicated service and, while RunAggregator
// runs, a candidate for the aggregator's lease. Its methods are safe for
// concurrent use.
type Node struct {
	cfg     Config
	id      string // this process, in the lease and snapshot names
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subjAdd string
	subjCmt string
	subjDec string
	state   jetstream.KeyValue
	lease   jetstream.KeyValue
	snaps   jetstream.ObjectStore
	sub     *nats.Subscription

	// decisionWait bounds how long a front-end waits for the
	// aggregator's decision on a contribution before answering logged.
	decisionWait time.Duration
	// aliveWindow: a front-end that heard nothing from a leading
	// aggregator (decisions or its heartbeat, every aliveEvery) for this
	// long answers logged as soon as the log confirmed a contribution,
	// rather than waiting decisionWait for a decision none may make
	// (no leader, or one taking over). 0: always wait decisionWait.
	aliveWindow time.Duration
	lastAlive   atomic.Int64 // unix nanoseconds of the last message on subjDec

	mu      sync.Mutex
	waiters map[string]chan decision
	ledger  aggregate.Ledger             // the ledger last served, for monotonicity
	mech    *aggregate.StrategyMechanism // decoded from a snapshot: storedMechanism

	// warmRelease is the release a standby's engine is restored at
	// (-1: none), for the logs and the tests.
	warmRelease atomic.Int64

	// logf reports the aggregator's transitions (lease won, lost, errors).
	logf func(format string, args ...any)
}

// New starts a node of the service cfg names on the connection nc: it
// checks cfg (its engine as aggregate.CheckConfig does), creates (or
// checks) the log, the buckets and the configuration every node must
// share, and listens for the aggregator's decisions. A request sent
// while JetStream elects a leader is retried for up to 60 s. Close stops
// the node; nc stays the caller's.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Node{
		cfg: cfg, id: cfg.ID, nc: nc,
		stream: cfg.Service + "_LOG", subjAdd: cfg.Service + ".log.add", subjCmt: cfg.Service + ".log.commit",
		subjDec: cfg.Service + ".decided", decisionWait: cfg.DecisionWait, aliveWindow: 5 * aliveEvery, waiters: map[string]chan decision{},
		logf: cfg.Logf,
	}
	r.warmRelease.Store(-1)
	if r.js, err = jetstream.New(nc); err != nil {
		return nil, err
	}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	if r.sub, err = nc.Subscribe(r.subjDec, r.onDecisions); err != nil {
		return nil, err
	}
	return r, nil
}

// ID is the node's id, as it appears in the lease and the logs.
func (r *Node) ID() string { return r.id }

// setup creates (or checks) the log, the buckets and the configuration
// every node must share. A request sent while JetStream elects a meta or
// stream leader (a node starting or restarting) gets no answer, so each
// step is retried in attempts of 5 s for up to 60 s in all; only a
// configuration that differs from the cluster's is final at once.
func (r *Node) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	kv := func(dst *jetstream.KeyValue, cfg jetstream.KeyValueConfig) func(context.Context) error {
		return func(ctx context.Context) (err error) {
			*dst, err = r.js.CreateOrUpdateKeyValue(ctx, cfg)
			return err
		}
	}
	steps := []struct {
		what string
		do   func(context.Context) error
	}{
		{"replicated log " + r.stream, func(ctx context.Context) error {
			_, err := r.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
				Name: r.stream, Subjects: []string{r.cfg.Service + ".log.>"}, Storage: jetstream.FileStorage,
				Replicas: r.cfg.Replicas, Duplicates: 10 * time.Minute, Retention: jetstream.LimitsPolicy, MaxAge: r.cfg.LogMaxAge,
			})
			return err
		}},
		{"state bucket", kv(&r.state, jetstream.KeyValueConfig{Bucket: r.cfg.Service + "_state",
			Replicas: r.cfg.Replicas, Storage: jetstream.FileStorage, History: 1})},
		{"lease bucket", kv(&r.lease, jetstream.KeyValueConfig{Bucket: r.cfg.Service + "_lease",
			Replicas: r.cfg.Replicas, Storage: jetstream.FileStorage, TTL: r.cfg.LeaseTTL})},
		{"snapshot store", func(ctx context.Context) (err error) {
			r.snaps, err = r.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: r.cfg.Service + "_snap",
				Replicas: r.cfg.Replicas, Storage: jetstream.FileStorage})
			return err
		}},
		{"stored configuration", r.checkConfig},
	}
	for _, st := range steps {
		var last error
		for {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			err := st.do(actx)
			acancel()
			if err == nil {
				break
			}
			if errors.Is(err, aggregate.ErrStoreMismatch) {
				return err
			}
			if ctx.Err() != nil {
				if last == nil || last.Error() == err.Error() {
					return fmt.Errorf("%s: %w", st.what, err)
				}
				return fmt.Errorf("%s: %w (before: %v)", st.what, err, last)
			}
			last = err
			time.Sleep(250 * time.Millisecond)
		}
	}
	return nil
}

// checkConfig stores this node's release-determining configuration, or
// checks it against the one stored by the first node: every node must
// run with the same.
func (r *Node) checkConfig(ctx context.Context) error {
	fp := r.cfg.fingerprint()
	_, err := r.state.Create(ctx, "config", fp)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	e, err := r.stateGet(ctx, "config")
	if err != nil {
		return err
	}
	if !bytes.Equal(e.value, fp) {
		return fmt.Errorf("%w: service %s on the cluster has %s, this node %s", aggregate.ErrStoreMismatch, r.cfg.Service, e.value, fp)
	}
	return nil
}

// Close stops listening for decisions, once RunAggregator returned; the
// connection stays open.
func (r *Node) Close() {
	if r.sub != nil {
		r.sub.Unsubscribe()
	}
}
