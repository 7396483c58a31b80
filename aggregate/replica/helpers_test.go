package replica

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/nats-io/nats.go"
)

const testSeed = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// testAggregate is the engine of the tests: tree-online over horizon
// steps, epsilon 1, delta 1e-6, clip 1, dimension dim, k = b = 1, with a
// count and the test seed if asked.
func testAggregate(t testing.TB, dim, horizon int, count, seeded bool) aggregate.Config {
	t.Helper()
	spec, err := privacy.ParseMechanism("tree-online")
	if err != nil {
		t.Fatal(err)
	}
	w, err := dpcore.PrefixSum(horizon)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := privacy.Participation{K: 1, B: 1}.Schema()
	if err != nil {
		t.Fatal(err)
	}
	mech, err := aggregate.BuildMechanism(context.Background(), spec, w, schema)
	if err != nil {
		t.Fatal(err)
	}
	cfg := aggregate.Config{Dim: dim, Workload: aggregate.Workload{Kind: aggregate.PrefixSum}, Mechanism: mech,
		Epsilon: 1, Delta: 1e-6, Clip: 1, K: 1, B: 1, Count: count, MaxBatch: 4096, NoiseMemory: aggregate.DefaultNoiseMemory}
	if seeded {
		b, _ := hex.DecodeString(testSeed)
		cfg.Seed, _ = dpcore.SeedOf(b)
	}
	return cfg
}

// testConfig is the configuration of the tests' nodes (as dpserve's
// flags -dim 2 -horizon 1024 -count -seed TEST -lease-ttl 2s gave it):
// service dpserve, 3 replicas.
func testConfig(t testing.TB) Config {
	return Config{Service: "dpserve", Aggregate: testAggregate(t, 2, 1024, true, true), LeaseTTL: 2 * time.Second, WorkDir: t.TempDir()}
}

// connect connects to the servers at url as dpserve does.
func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// dial starts a node of cfg on a new connection to url, both closed when
// the test ends.
func dial(t testing.TB, url string, cfg Config) *Node {
	t.Helper()
	nc := connect(t, url)
	r, err := New(context.Background(), nc, cfg)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); nc.Close() })
	return r
}

// aggProc is an aggregator "process": killing it cancels its work and
// drops its connection without giving the lease up (as kill -9 would).
type aggProc struct {
	r      *Node
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

// startAggregator starts a node of cfg on its own connection to url, its
// log in the test's, and runs its aggregator.
func startAggregator(t *testing.T, url string, cfg Config) *aggProc {
	t.Helper()
	cfg.Logf = func(format string, args ...any) { t.Logf(time.Now().Format("15:04:05.000 ")+format, args...) }
	nc := connect(t, url)
	r, err := New(context.Background(), nc, cfg)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &aggProc{r: r, nc: nc, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(p.done); r.RunAggregator(ctx) }()
	return p
}

func (p *aggProc) kill() {
	p.nc.Close()
	p.cancel()
	<-p.done
}
