package distributed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/train"
)

// The worker processes of the kill tests are this test binary, re-executed
// with workerChildEnv = "url|token|run|shard" and killed with SIGKILL.
const workerChildEnv = "DPMF_DISTRIBUTED_WORKER_CHILD"

const killSteps = 30

func TestWorkerChild(t *testing.T) {
	spec := os.Getenv(workerChildEnv)
	if spec == "" {
		t.Skip("skipped because it runs only as a worker process of TestWorkerKilledMidRun")
	}
	f := strings.Split(spec, "|")
	shard, err := ParseShard(f[3])
	if err != nil {
		t.Fatal(err)
	}
	nc := connect(t, f[0], f[1])
	ready := make(chan error, 1)
	go func() {
		if err := <-ready; err == nil {
			os.Stdout.WriteString("worker ready\n")
		}
	}()
	opt := Options{Run: f[2], Workers: shard.Count}
	if err := serveReady(context.Background(), nc, testConfig(t, killSteps), shard, opt, ready); err != nil {
		t.Fatal(err)
	}
}

// workerProcs runs worker processes for a run.
type workerProcs struct {
	t               *testing.T
	url, token, run string
	w               int
	mu              sync.Mutex
	procs           map[int]*exec.Cmd
}

func newWorkerProcs(t *testing.T, url, token, run string, w int) *workerProcs {
	p := &workerProcs{t: t, url: url, token: token, run: run, w: w, procs: map[int]*exec.Cmd{}}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.procs {
			c.Process.Kill()
			c.Wait()
		}
	})
	return p
}

// start starts worker i and waits until it listens.
func (p *workerProcs) start(i int) error {
	c := exec.Command(os.Args[0], "-test.run=^TestWorkerChild$", "-test.v")
	c.Env = append(os.Environ(), workerChildEnv+"="+strings.Join([]string{p.url, p.token, p.run, Shard{i, p.w}.String()}, "|"))
	out, err := c.StdoutPipe()
	if err != nil {
		return err
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		return err
	}
	p.mu.Lock()
	p.procs[i] = c
	p.mu.Unlock()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == "worker ready" {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			return errors.New("worker process exited before it was ready")
		}
		return nil
	case <-time.After(2 * time.Minute):
		return errors.New("worker process not ready after 2 minutes")
	}
}

// kill sends worker i SIGKILL and reaps it.
func (p *workerProcs) kill(i int) {
	p.mu.Lock()
	c := p.procs[i]
	delete(p.procs, i)
	p.mu.Unlock()
	c.Process.Kill()
	c.Wait()
}

// metricsSteps reads the step numbers of a metrics file in order.
func metricsSteps(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec struct {
			Kind string `json:"kind"`
			Step int    `json:"step"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		if rec.Kind == "step" {
			steps = append(steps, rec.Step)
		}
	}
	return steps
}

func checkEveryStepOnce(t *testing.T, steps []int, n int) {
	t.Helper()
	if len(steps) != n {
		t.Fatalf("metrics hold %d steps, want %d: %v", len(steps), n, steps)
	}
	for i, s := range steps {
		if s != i+1 {
			t.Fatalf("metrics step %d is %d: %v", i+1, s, steps)
		}
	}
}

func sameParams(t *testing.T, want, got []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("parameter %d: uninterrupted run %v, this run %v", i, want[i], got[i])
		}
	}
}

// A worker process killed with SIGKILL at a random moment after step 10
// (between steps or inside step 11's computation). Either the run stops
// cleanly (the worker stays away longer than Wait): the step is rolled
// back, the checkpoint holds the last complete step, and the same run
// started again with the worker back resumes there; or a replacement
// comes up within Wait and answers the retried request. Both end with the
// parameters of the uninterrupted run bit for bit (the workers add their
// sums in shard order, so a run on three workers is deterministic) and
// every step in the metrics exactly once: no step was half applied.
func TestWorkerKilledMidRun(t *testing.T) {
	if testing.Short() && os.Getenv(workerChildEnv) != "" {
		t.Skip("skipped because this process is a worker the test started")
	}
	cfg := testConfig(t, killSteps)
	cfg.Output.EvalEvery = 10
	_, want, _ := run(t, cfg, 3)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 31))

	t.Run("stop and resume", func(t *testing.T) {
		url, token := natsServer(t)
		procs := newWorkerProcs(t, url, token, "kill", 3)
		for i := range 3 {
			if err := procs.start(i); err != nil {
				t.Fatal(err)
			}
		}
		dir := t.TempDir()
		cfg := cfg
		cfg.Output.CheckpointPath, cfg.Output.CheckpointEvery = filepath.Join(dir, "run.ckpt"), 4
		cfg.Output.MetricsPath = filepath.Join(dir, "metrics.jsonl")
		m, err := train.NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Model.Built = m
		delay := time.Duration(rng.IntN(30)) * time.Millisecond
		cfg.Output.OnStep = func(sm train.StepMetrics) {
			if sm.Step == 10 {
				go func() { time.Sleep(delay); procs.kill(1) }()
			}
		}
		opt := Options{Run: "kill", Workers: 3, RequestTimeout: time.Second, Wait: 2 * time.Second}
		nc := connect(t, url, token)
		start := time.Now()
		_, err = Run(context.Background(), nc, cfg, opt)
		if !errors.Is(err, ErrWorkerLost) || !errors.Is(err, train.ErrInterrupted) {
			t.Fatalf("after killing worker 1: %v, want an error wrapping ErrWorkerLost and train.ErrInterrupted", err)
		}
		t.Logf("killed %v after step 10; stopped in %.1fs: %v", delay, time.Since(start).Seconds(), err)
		stopped := metricsSteps(t, cfg.Output.MetricsPath)
		if len(stopped) < 10 || len(stopped) >= killSteps {
			t.Fatalf("stopped after %d steps, want at least 10 (the kill came after step 10) and fewer than %d", len(stopped), killSteps)
		}
		checkEveryStepOnce(t, stopped, len(stopped))
		if !strings.Contains(err.Error(), "resume from step "+strconv.Itoa(len(stopped))) {
			t.Fatalf("the error does not say the run resumes from step %d: %v", len(stopped), err)
		}

		if err := procs.start(1); err != nil {
			t.Fatal(err)
		}
		if cfg.Model.Built, err = train.NewModel(cfg); err != nil {
			t.Fatal(err)
		}
		cfg.Output.OnStep = nil
		res, err := Run(context.Background(), nc, cfg, opt)
		if err != nil {
			t.Fatal(err)
		}
		if res.Resumed != len(stopped) {
			t.Fatalf("resumed from step %d, want %d", res.Resumed, len(stopped))
		}
		sameParams(t, want, cfg.Model.Built.Params())
		checkEveryStepOnce(t, metricsSteps(t, cfg.Output.MetricsPath), killSteps)
	})

	t.Run("retry", func(t *testing.T) {
		url, token := natsServer(t)
		procs := newWorkerProcs(t, url, token, "retry", 3)
		for i := range 3 {
			if err := procs.start(i); err != nil {
				t.Fatal(err)
			}
		}
		dir := t.TempDir()
		cfg := cfg
		cfg.Output.MetricsPath = filepath.Join(dir, "metrics.jsonl")
		m, err := train.NewModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Model.Built = m
		// Three kills, each of a random worker at a random moment after
		// steps 8, 16 and 24, each followed by a replacement. Every step
		// needs every worker, so the run waits for each replacement.
		restarted := make(chan error, 3)
		cfg.Output.OnStep = func(sm train.StepMetrics) {
			if sm.Step%8 == 0 {
				i, delay := rng.IntN(3), time.Duration(rng.IntN(30))*time.Millisecond
				go func() {
					time.Sleep(delay)
					procs.kill(i)
					restarted <- procs.start(i)
				}()
			}
		}
		opt := Options{Run: "retry", Workers: 3, RequestTimeout: time.Second, Wait: 2 * time.Minute}
		if _, err := Run(context.Background(), connect(t, url, token), cfg, opt); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := <-restarted; err != nil {
				t.Fatal(err)
			}
		}
		sameParams(t, want, m.Params())
		checkEveryStepOnce(t, metricsSteps(t, cfg.Output.MetricsPath), killSteps)
	})
}
