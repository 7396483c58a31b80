package distributed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/natstest"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// testConfig is the run every test trains: the MLP on 1,800 examples of
// the embedded Fashion-MNIST subset (every class), seeded.
func testConfig(t testing.TB, steps int) train.Config {
	t.Helper()
	tr, te, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, 0, 1800)
	for i := 0; i < tr.Len() && len(idx) < cap(idx); i += 3 {
		idx = append(idx, i)
	}
	if tr, err = tr.Subset(idx); err != nil {
		t.Fatal(err)
	}
	return train.Config{
		Data:      train.Data{Train: tr, Test: te},
		Model:     train.ModelSpec{Name: "mlp", Hidden: []int{32}},
		Privacy:   privacy.Request{Steps: steps, Batch: 60, Mechanism: mfnoise.DPSGD{}, Epsilon: 8, Accountant: privacy.RDP, ClipNorm: 1, Seed: []byte("distributed test seed"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 0.5},
		Output:    train.Output{EvalEvery: 1 << 20},
	}
}

// natsServer starts a token-protected loopback NATS server.
func natsServer(t testing.TB) (url, token string) {
	t.Helper()
	token = "test-token-" + fmt.Sprint(time.Now().UnixNano())
	s := natstest.Serve(t, &natsserver.Options{Host: "127.0.0.1", Port: -1, Authorization: token, MaxPayload: 8 << 20})
	return s.ClientURL(), token
}

func connect(t testing.TB, url, token string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// inProcessWorkers serves the W shards from goroutines, each on its own
// connection, until the test ends.
func inProcessWorkers(t *testing.T, url, token string, cfg train.Config, opt Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range opt.Workers {
		nc := connect(t, url, token)
		ready := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := serveReady(ctx, nc, cfg, Shard{i, opt.Workers}, opt, ready)
			if err != nil && ctx.Err() == nil {
				t.Errorf("worker %d: %v", i, err)
			}
		}()
		if err := <-ready; err != nil {
			t.Fatal(err)
		}
	}
}

// serveReady is Serve, saying on ready when the worker listens (or
// failed to start).
func serveReady(ctx context.Context, nc *nats.Conn, cfg train.Config, s Shard, opt Options, ready chan<- error) error {
	opt.OnReady = func() { ready <- nil }
	err := Serve(ctx, nc, cfg, s, opt)
	if err != nil {
		select {
		case ready <- err:
		default:
		}
	}
	return err
}

// run trains cfg (a fresh model from its seed) on W workers, or in one
// process for W = 0, and returns the result, the final parameters and the
// step metrics.
func run(t *testing.T, cfg train.Config, w int) (*train.Result, []float32, []train.StepMetrics) {
	t.Helper()
	m, err := train.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model.Built = m
	var steps []train.StepMetrics
	cfg.Output.OnStep = func(sm train.StepMetrics) { steps = append(steps, sm) }
	var res *train.Result
	if w == 0 {
		res, err = train.Run(context.Background(), cfg)
	} else {
		url, token := natsServer(t)
		opt := Options{Run: "test", Workers: w, RequestTimeout: 20 * time.Second, Wait: 20 * time.Second}
		inProcessWorkers(t, url, token, cfg, opt)
		res, err = Run(context.Background(), connect(t, url, token), cfg, opt)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res, append([]float32(nil), m.Params()...), steps
}

// resultJSON is the result with the wall-clock time zeroed.
func resultJSON(t *testing.T, res *train.Result) string {
	r := *res
	r.Elapsed = 0
	b, err := json.MarshalIndent(&r, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func planJSON(t *testing.T, res *train.Result) string {
	b, err := json.MarshalIndent(res.Plan, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// One worker adds its chunks in the trainer's order and the coordinator
// adds that sum to zero: the run is the single-process run bit for bit,
// result JSON (plan, ledger, evaluations) included.
func TestOneWorkerReproducesOneProcess(t *testing.T) {
	cfg := testConfig(t, 12)
	res1, p1, _ := run(t, cfg, 0)
	resW, pW, _ := run(t, cfg, 1)
	if a, b := resultJSON(t, res1), resultJSON(t, resW); a != b {
		t.Fatalf("results differ:\none process:\n%s\none worker:\n%s", a, b)
	}
	for i := range p1 {
		if math.Float32bits(p1[i]) != math.Float32bits(pW[i]) {
			t.Fatalf("parameter %d: one process %v, one worker %v", i, p1[i], pW[i])
		}
	}
}

// Three workers: the same plan and ledger byte for byte, and the same
// trajectory up to the order of the float additions of the clipped sum.
func TestThreeWorkersMatchOneProcess(t *testing.T) {
	steps := 200
	if testing.Short() {
		steps = 60
	}
	cfg := testConfig(t, steps)
	cfg.Output.EvalEvery = steps / 2
	res1, p1, s1 := run(t, cfg, 0)
	res3, p3, s3 := run(t, cfg, 3)
	if a, b := planJSON(t, res1), planJSON(t, res3); a != b {
		t.Fatalf("plans differ:\none process:\n%s\nthree workers:\n%s", a, b)
	}
	if len(s1) != steps || len(s3) != steps {
		t.Fatalf("%d and %d steps, want %d", len(s1), len(s3), steps)
	}
	for i := range s1 {
		a, b := s1[i], s3[i]
		// The batch is the sampler's, the same in both: sizes exactly,
		// statistics to float rounding.
		if a.BatchSize != b.BatchSize || a.Epsilon != b.Epsilon || a.NonFinite != b.NonFinite {
			t.Fatalf("step %d: one process %+v, three workers %+v", i+1, a, b)
		}
		if d := math.Abs(a.Loss - b.Loss); d > 1e-5*math.Abs(a.Loss) {
			t.Fatalf("step %d: loss %v vs %v", i+1, a.Loss, b.Loss)
		}
	}
	var maxDiff, maxAbs float64
	for i := range p1 {
		maxDiff = math.Max(maxDiff, math.Abs(float64(p1[i]-p3[i])))
		maxAbs = math.Max(maxAbs, math.Abs(float64(p1[i])))
	}
	t.Logf("after %d steps: max |parameter difference| %.3g (max |parameter| %.3g); accuracy %.4f vs %.4f",
		steps, maxDiff, maxAbs, res1.Final.Accuracy, res3.Final.Accuracy)
	if maxDiff > 1e-6 {
		t.Fatalf("parameters differ by up to %g after %d steps: more than float summation order explains", maxDiff, steps)
	}
	if math.Abs(res1.Final.Accuracy-res3.Final.Accuracy) > 0.002 {
		t.Fatalf("accuracy %v (one process) vs %v (three workers)", res1.Final.Accuracy, res3.Final.Accuracy)
	}
	if res1.Final.Epsilon != res3.Final.Epsilon || res1.Final.Delta != res3.Final.Delta {
		t.Fatalf("privacy (%v, %v) vs (%v, %v)", res1.Final.Epsilon, res1.Final.Delta, res3.Final.Epsilon, res3.Final.Delta)
	}
}

// A worker started with other settings (here the clip norm) refuses every
// request: the run stops at its first step, which is not applied.
func TestWorkerWithOtherSettingsRefuses(t *testing.T) {
	cfg := testConfig(t, 5)
	url, token := natsServer(t)
	opt := Options{Run: "refuse", Workers: 2, RequestTimeout: 10 * time.Second, Wait: 10 * time.Second}
	other := cfg
	other.Privacy.ClipNorm = 2
	inProcessWorkers(t, url, token, other, opt)
	m, err := train.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	init := append([]float32(nil), m.Params()...)
	cfg.Model.Built = m
	_, err = Run(context.Background(), connect(t, url, token), cfg, opt)
	if !errors.Is(err, ErrWorkerRefused) || !strings.Contains(err.Error(), "differs from this worker's") {
		t.Fatalf("got %v, want a refusal naming the difference", err)
	}
	// Bad input (exit 2 in cmd/train), not an interruption to resume.
	if !errors.Is(err, dpcore.ErrInvalid) || errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("got %v: want it to match ErrInvalid and not ErrInterrupted", err)
	}
	for i, v := range m.Params() {
		if v != init[i] {
			t.Fatalf("parameter %d moved to %v from %v: a refused step was applied", i, v, init[i])
		}
	}
}

// What the workers cannot compute as one process would is refused with
// ErrInvalid before anything runs.
func TestRefusedConfigurations(t *testing.T) {
	url, token := natsServer(t)
	nc := connect(t, url, token)
	for name, edit := range map[string]func(*train.Config, *Options){
		"augmentation": func(c *train.Config, _ *Options) { c.Data.Augment = &train.Augmentation{} },
		"no workers":   func(_ *train.Config, o *Options) { o.Workers = 0 },
		"bad run name": func(_ *train.Config, o *Options) { o.Run = "a.b" },
		"user level":   func(c *train.Config, _ *Options) { c.Privacy.UserBound = &privacy.UserBound{} },
		"multiplicity": func(c *train.Config, _ *Options) { c.Data.Augment = &train.Augmentation{Multiplicity: 2} },
		"adaptive clip": func(c *train.Config, _ *Options) {
			c.Privacy.Quantile = &privacy.QuantileRelease{Target: 0.5, NoiseStd: 10, LearningRate: 0.2}
		},
		"too many workers": func(c *train.Config, o *Options) { o.Workers = c.Data.Train.Len() + 1 },
	} {
		cfg := testConfig(t, 5)
		opt := Options{Run: "r", Workers: 2}
		edit(&cfg, &opt)
		if _, err := Run(context.Background(), nc, cfg, opt); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	// The coordinator's engine offers the trainer nothing the workers
	// do not do: no per-user sums (user level, augmentation multiplicity),
	// no clip norm to change during the run.
	if _, ok := any(&engine{}).(train.UserEngine); ok {
		t.Error("the coordinator's engine is a UserEngine: the trainer would combine examples the workers clip one by one")
	}
	if _, ok := any(&engine{}).(interface{ SetNorm(float64) error }); ok {
		t.Error("the coordinator's engine can change its clip norm: the workers would clip with the old one")
	}
	if _, err := ParseShard("3/3"); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("shard 3/3: got %v", err)
	}
	if s, err := ParseShard("2/3"); err != nil || s != (Shard{2, 3}) {
		t.Errorf("shard 2/3: got %v, %v", s, err)
	}
}

// A worker whose sum no set of clipped gradients can make (a bug, or a
// worker that does not clip) is refused before noise is drawn: the step is
// not applied.
func TestCoordinatorRefusesOversizedSum(t *testing.T) {
	cfg := testConfig(t, 3)
	url, token := natsServer(t)
	opt := Options{Run: "oversized", Workers: 1, RequestTimeout: 10 * time.Second, Wait: 10 * time.Second}
	w, err := newWorker(context.Background(), cfg, Shard{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	nc := connect(t, url, token)
	if _, err := nc.Subscribe(opt.subject(0), func(m *nats.Msg) {
		p := w.compute(m.Data)
		if p.refusal == "" {
			p.sum[0] += float32(cfg.Privacy.ClipNorm) * float32(p.examples+1) // one example counted far beyond the clip norm
		}
		m.Respond(encodeReply(p))
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	m, err := train.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	init := append([]float32(nil), m.Params()...)
	cfg.Model.Built = m
	_, err = Run(context.Background(), connect(t, url, token), cfg, opt)
	if !errors.Is(err, ErrWorkerRefused) || !strings.Contains(err.Error(), "x clip norm") {
		t.Fatalf("got %v, want the oversized sum refused", err)
	}
	for i, v := range m.Params() {
		if v != init[i] {
			t.Fatalf("parameter %d moved: a refused step was applied", i)
		}
	}
}

// fakeWorker serves shard 0 of 1 with handle instead of a worker's own.
func fakeWorker(t *testing.T, cfg train.Config, opt Options, handle func(w *worker, m *nats.Msg)) (url, token string) {
	t.Helper()
	url, token = natsServer(t)
	w, err := newWorker(context.Background(), cfg, Shard{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	nc := connect(t, url, token)
	w.nc = nc
	if _, err := nc.Subscribe(opt.subject(0), func(m *nats.Msg) { handle(w, m) }); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	return url, token
}

// A worker that takes requests and never answers nor sends heartbeats
// (hung, or its machine gone without closing the connection) is asked
// again after RequestTimeout of silence and given up after Wait.
func TestSilentWorkerIsLost(t *testing.T) {
	cfg := testConfig(t, 3)
	opt := Options{Run: "silent", Workers: 1, RequestTimeout: time.Second, Wait: 2 * time.Second}
	var mu sync.Mutex
	asked := 0
	url, token := fakeWorker(t, cfg, opt, func(*worker, *nats.Msg) { mu.Lock(); asked++; mu.Unlock() })
	start := time.Now()
	_, err := Run(context.Background(), connect(t, url, token), cfg, opt)
	if !errors.Is(err, ErrWorkerLost) || !strings.Contains(err.Error(), "neither an answer nor a heartbeat") {
		t.Fatalf("got %v, want the silent worker lost", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if el := time.Since(start); asked < 2 || el > 30*time.Second {
		t.Fatalf("asked %d times in %v: want asked again after each second of silence, given up after about 2 s", asked, el)
	}
}

// A worker that needs longer than RequestTimeout for its share of a step
// but sends heartbeats meanwhile is waited for, not asked again.
func TestHeartbeatsKeepASlowWorker(t *testing.T) {
	cfg := testConfig(t, 2)
	opt := Options{Run: "slow", Workers: 1, RequestTimeout: time.Second, Wait: time.Minute}
	var mu sync.Mutex
	asked := 0
	url, token := fakeWorker(t, cfg, opt, func(w *worker, m *nats.Msg) {
		mu.Lock()
		asked++
		mu.Unlock()
		nonce, _ := requestNonce(m.Data)
		for range 10 { // 2.5 s of heartbeats
			time.Sleep(heartbeatEvery)
			w.nc.Publish(m.Reply, encodeHeartbeat(nonce))
		}
		m.Respond(encodeReply(w.compute(m.Data)))
	})
	if _, err := Run(context.Background(), connect(t, url, token), cfg, opt); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 2 {
		t.Fatalf("the worker was asked %d times for 2 steps: a worker sending heartbeats was asked again", asked)
	}
}

// A worker given a built model (Config.Model, the caller's handle, shared
// with the coordinator in one process) computes on its own copy: seen as a
// data race under -race before, when three in-process workers and the
// coordinator wrote one parameter buffer.
func TestWorkerCopiesTheModel(t *testing.T) {
	cfg := testConfig(t, 2)
	m, err := train.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model.Built = m
	w, err := newWorker(context.Background(), cfg, Shard{0, 2})
	if err != nil {
		t.Fatal(err)
	}
	p, q := w.engine.Params(), m.Params()
	if &p[0] == &q[0] {
		t.Fatal("the worker computes on the caller's parameter buffer")
	}
	for i := range q {
		if p[i] != q[i] {
			t.Fatalf("parameter %d: copy %v, model %v", i, p[i], q[i])
		}
	}
}
