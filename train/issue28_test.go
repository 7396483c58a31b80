package train

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// buildCounter is a context whose factorization builds are counted.
func buildCounter(ctx context.Context) (context.Context, *int) {
	n := new(int)
	return mfnoise.WithBuildTrace(ctx, &mfnoise.BuildTrace{
		Optimizing: func(string, int, float64) { *n++ },
	}), n
}

// Issue 28 item 5: resuming with changed settings is refused before the
// factorization is built, naming each differing setting with both values.
// Before the fix the plan was built first and the message named nothing
// ("it belongs to a different configuration"): seen failing.
func TestResumeWithOtherSettingsRefusedBeforeBuilding(t *testing.T) {
	dir := t.TempDir()
	cfg := faultConfig(t, dir)
	cfg.Privacy.Mechanism = mfnoise.BandMF{Bands: 2}
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	changed := cfg
	changed.Privacy.Steps, changed.Optimizer.LearningRate = 40, 0.2
	ctx, builds := buildCounter(context.Background())
	_, err := New(ctx, changed)
	if !errors.Is(err, ErrCorruptCheckpoint) {
		t.Fatalf("resume with other flags: %v, want ErrCorruptCheckpoint", err)
	}
	for _, want := range []string{"steps: checkpoint has 30, asked for 40", "learning rate: checkpoint has 0.1, asked for 0.2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "momentum") || strings.Contains(err.Error(), "batch:") {
		t.Errorf("message names settings that did not change: %v", err)
	}
	if *builds != 0 {
		t.Errorf("%d factorizations built before the refusal", *builds)
	}
	// The same settings resume.
	if _, err := New(context.Background(), cfg); err != nil {
		t.Fatalf("resume with the same settings: %v", err)
	}
}

// Issue 28 item 5: -bands beyond examples/batch and a per-layer clip of
// the wrong length are refused before any factorization is built (before
// the fix both came after the build: seen failing).
func TestBandsAndPerLayerClipRefusedBeforeBuilding(t *testing.T) {
	for name, edit := range map[string]func(*Config){
		"bands":          func(c *Config) { c.Privacy.Partitions = 100000 },
		"clip per layer": func(c *Config) { c.Model.ClipPerLayer = []float64{1, 2, 3} },
	} {
		cfg := faultConfig(t, t.TempDir())
		cfg.Output.CheckpointPath, cfg.Output.MetricsPath = "", ""
		cfg.Privacy.Mechanism = parseMech(t, "bandmf:auto")
		edit(&cfg)
		ctx, builds := buildCounter(context.Background())
		_, err := New(ctx, cfg)
		if !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: %v, want dpcore.ErrInvalid", name, err)
		}
		if *builds != 0 {
			t.Errorf("%s: %d factorizations built before the refusal (%v)", name, *builds, err)
		}
	}
}

// Issue 28 item 2: sizes that cannot fit are refused with the memory they
// would need, before anything is allocated. Before the fix 9e12 steps died
// with "fatal error: runtime: out of memory" in dpcore.Schedule.Rates and
// the wide MLP and the billion canaries tried to allocate terabytes (seen
// failing, the test process killed).
func TestSizesThatCannotFitRefused(t *testing.T) {
	ctx := context.Background()
	steps := baseConfig(t)
	steps.Privacy.Steps = 9_000_000_000_000
	wide := baseConfig(t)
	wide.Model.Name, wide.Model.Hidden = "mlp", []int{1_000_000_000, 1_000_000_000}
	for name, cfg := range map[string]Config{"steps": steps, "hidden": wide} {
		_, err := Run(ctx, cfg)
		if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "would need") || !strings.Contains(err.Error(), "iB") {
			t.Errorf("%s: %v, want a refusal stating the memory", name, err)
		}
	}
	cfg := auditConfig(t, "dpsgd", 2, 0, "")
	cfg.Privacy.Steps = 10
	_, err := Audit(ctx, cfg, AuditOptions{Canaries: 1_000_000_000, Mode: AuditWhitebox})
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "would need") {
		t.Errorf("a billion canaries: %v, want a refusal stating the memory", err)
	}
}

// cancelAfter is a context whose Err turns to context.Canceled after n
// calls: it cancels a step at a point no timer could hit reliably.
type cancelAfter struct {
	context.Context
	n atomic.Int64
}

func (c *cancelAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

func (c *cancelAfter) Done() <-chan struct{} { return nil }

// Issue 28 item 11: cancellation is seen inside a step (between the
// chunks of examples of the clipped sum), not only between steps; the
// cancelled step is rolled back, and the run then goes on exactly as if
// it had never been cancelled. Before the fix the step ran to its end
// (seen failing: no error).
func TestCancelInsideAStep(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Privacy.Batch = 400 // several chunks whatever the number of workers
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// TrainStep checks once on entry and once before the (single) engine
	// batch: the third check is inside the clipped sum.
	ctx := &cancelAfter{Context: context.Background()}
	ctx.n.Store(2)
	if _, err := tr.TrainStep(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("step under a context cancelled mid-step: %v, want context.Canceled", err)
	}
	if tr.Step() != 0 {
		t.Fatalf("cancelled step left the trainer at step %d", tr.Step())
	}
	ref, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := tr.TrainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := ref.TrainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sameParams(t, tr.Model().Params(), ref.Model().Params(), "after a cancelled step")
}

// Issue 28 item 11: a signal that arrives after the last step, during the
// final evaluation (minutes on WRN-16-4's test set), interrupts the run
// instead of being ignored. Before the fix Run finished and returned its
// result (seen failing).
func TestCancelDuringFinalEvaluationInterrupts(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Privacy.Steps = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Output.OnStep = func(sm StepMetrics) {
		if sm.Step == cfg.Privacy.Steps {
			cancel()
		}
	}
	start := time.Now()
	_, err := Run(ctx, cfg)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("cancelled during the final evaluation: %v (after %v), want ErrInterrupted", err, time.Since(start))
	}
}

// Issue 28 item 2: the memory limit is the least of physical memory,
// GOMEMLIMIT and ulimit -v: a model that fits the machine but not the
// limit the process runs under is refused, stating both.
func TestMemoryLimitHonoursGOMEMLIMIT(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Model.Name, cfg.Model.Hidden = "mlp", []int{1 << 20} // 22,020,100 parameters: 8 arrays of float32 are 672 MiB
	old := debug.SetMemoryLimit(256 << 20)
	defer debug.SetMemoryLimit(old)
	err := cfg.checkSizes()
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "would need 672.0 MiB") || !strings.Contains(err.Error(), "256.0 MiB available") {
		t.Fatalf("%v: want a refusal at the 256 MiB limit", err)
	}
	debug.SetMemoryLimit(old)
	if limit := memoryLimit(); limit > 0 && limit < 1<<30 {
		t.Skipf("skipped: this process may use only %d bytes", limit)
	}
	if err := cfg.checkSizes(); err != nil {
		t.Fatalf("without the limit: %v", err)
	}
}
