package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
)

// checkMetricsFile asserts the metrics contract: every line parses, the
// step lines are 1..steps once each and in order, and the evaluation lines
// are exactly evals (in order), each after its step.
func checkMetricsFile(t *testing.T, path string, steps int, evals []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("metrics file does not end in a newline: torn last line %q", b[bytes.LastIndexByte(b, '\n')+1:])
	}
	next, var_ := 1, []int(nil)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for ln := 1; sc.Scan(); ln++ {
		var rec struct {
			Kind string `json:"kind"`
			Step *int   `json:"step"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Step == nil {
			t.Fatalf("metrics line %d does not parse (%v): %q", ln, err, sc.Text())
		}
		switch rec.Kind {
		case "step":
			if *rec.Step != next {
				t.Fatalf("metrics line %d: step %d, want %d (a step missing or duplicated)", ln, *rec.Step, next)
			}
			next++
		case "eval":
			if *rec.Step != next-1 {
				t.Fatalf("metrics line %d: evaluation at step %d after step %d", ln, *rec.Step, next-1)
			}
			var_ = append(var_, *rec.Step)
		default:
			t.Fatalf("metrics line %d: kind %q", ln, rec.Kind)
		}
	}
	if next-1 != steps {
		t.Fatalf("metrics file ends at step %d, want %d", next-1, steps)
	}
	if fmt.Sprint(var_) != fmt.Sprint(evals) {
		t.Fatalf("evaluations at steps %v, want %v", var_, evals)
	}
}

func evalSteps(res *Result) []int {
	var s []int
	for _, e := range res.Evals {
		s = append(s, e.Step)
	}
	return s
}

func sameParams(t *testing.T, a, b []float32, what string) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d parameters, want %d", what, len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: parameter %d = %v, uninterrupted %v", what, i, a[i], b[i])
		}
	}
}

// faultConfig is a 30-step banded-MF run with evaluations every 5 steps
// and checkpoints every 4.
func faultConfig(t testing.TB, dir string) Config {
	cfg := baseConfig(t)
	cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Optimizer.Momentum, cfg.Optimizer.LearningRate = mfnoise.BandMF{Bands: 4}, 30, 0.9, 0.1
	cfg.Output.EvalEvery, cfg.Privacy.Accountant = 5, privacy.RDP // RDP plans in milliseconds
	cfg.Output.CheckpointPath, cfg.Output.CheckpointEvery = filepath.Join(dir, "run.ckpt"), 4
	cfg.Output.MetricsPath = filepath.Join(dir, "metrics.jsonl")
	return cfg
}

func uninterrupted(t *testing.T) (*Result, []float32) {
	t.Helper()
	cfg := faultConfig(t, t.TempDir())
	cfg.Output.CheckpointPath, cfg.Output.MetricsPath = "", ""
	return nil, trainToEnd(t, cfg)
}

// trainToEnd runs cfg's steps uninterrupted (New, then TrainStep until
// done) and returns a copy of the parameters.
func trainToEnd(t *testing.T, cfg Config) []float32 {
	t.Helper()
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for !tr.Done() {
		if _, err := tr.TrainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return append([]float32(nil), tr.Model().Params()...)
}

// An interrupt (the context cancelled during step 13) saves a checkpoint
// at step 13 and says how to resume; the resumed run says from which step,
// keeps the evaluations from before the interrupt, and ends bit-identical
// to an uninterrupted run with a metrics file that has every step once.
func TestInterruptSavesCheckpointAndResumeSaysFromWhere(t *testing.T) {
	dir := t.TempDir()
	cfg := faultConfig(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Output.OnStep = func(sm StepMetrics) {
		if sm.Step == 13 {
			cancel()
		}
	}
	_, err := Run(ctx, cfg)
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want ErrInterrupted wrapping context.Canceled, got %v", err)
	}
	for _, want := range []string{"at step 13 of 30", "checkpoint saved to " + cfg.Output.CheckpointPath, "resume from step 13"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("interrupt message %q lacks %q", err, want)
		}
	}
	var log bytes.Buffer
	cfg = faultConfig(t, dir)
	cfg.Output.Log = &log
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "resumed from checkpoint "+cfg.Output.CheckpointPath+" at step 13 of 30") || res.Resumed != 13 {
		t.Fatalf("resume not announced (Resumed %d):\n%s", res.Resumed, log.String())
	}
	if got := fmt.Sprint(evalSteps(res)); got != "[5 10 15 20 25 30]" {
		t.Fatalf("result evaluations at steps %s, want those before the interrupt too", got)
	}
	checkMetricsFile(t, cfg.Output.MetricsPath, 30, []int{5, 10, 15, 20, 25, 30})
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, want := uninterrupted(t)
	sameParams(t, tr.Model().Params(), want, "interrupted at 13 and resumed")
}

// After a kill the metrics file can hold records past the checkpoint and a
// torn last line: resuming truncates it back to the checkpoint's step.
// (Before the fix the file kept the torn line glued to the next record and
// the steps after the checkpoint twice.)
func TestResumeTruncatesMetricsToCheckpoint(t *testing.T) {
	dir := t.TempDir()
	cfg := faultConfig(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Output.OnStep = func(sm StepMetrics) {
		if sm.Step == 12 {
			cancel()
		}
	}
	if _, err := Run(ctx, cfg); !errors.Is(err, ErrInterrupted) {
		t.Fatal(err)
	}
	// What a kill after step 14 leaves: steps 13 and 14 written after the
	// checkpoint at 12, and half of step 15.
	f, err := os.OpenFile(cfg.Output.MetricsPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(f, `{"kind":"step","step":13,"loss":1}`+"\n"+`{"kind":"step","step":14,"loss":1}`+"\n"+`{"kind":"step","st`)
	f.Close()
	cfg = faultConfig(t, dir)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkMetricsFile(t, cfg.Output.MetricsPath, 30, []int{5, 10, 15, 20, 25, 30})
	if got := fmt.Sprint(evalSteps(res)); got != "[5 10 15 20 25 30]" {
		t.Fatalf("result evaluations at steps %s", got)
	}
	// Resuming a finished run evaluates once more but records it once.
	res, err = Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkMetricsFile(t, cfg.Output.MetricsPath, 30, []int{5, 10, 15, 20, 25, 30})
	if res.Resumed != 30 || fmt.Sprint(evalSteps(res)) != "[5 10 15 20 25 30]" {
		t.Fatalf("rerun of a finished run: resumed %d, evaluations %v", res.Resumed, evalSteps(res))
	}
}

// Unwritable outputs are refused before the plan is built and before the
// first step, not at the first checkpoint or the end of the run.
func TestOutputPathsCheckedBeforeFirstStep(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	for _, edit := range []func(*Config){
		func(c *Config) { c.Output.CheckpointPath = filepath.Join(missing, "run.ckpt") },
		func(c *Config) { c.Output.MetricsPath = filepath.Join(missing, "m.jsonl") },
		func(c *Config) { c.Output.CheckpointPath = t.TempDir() }, // a directory
	} {
		cfg := faultConfig(t, t.TempDir())
		edit(&cfg)
		steps := 0
		cfg.Output.OnStep = func(StepMetrics) { steps++ }
		_, err := Run(context.Background(), cfg)
		if !errors.Is(err, dpcore.ErrInvalid) || steps != 0 {
			t.Fatalf("after %d steps: want dpcore.ErrInvalid before the first step, got %v", steps, err)
		}
	}
}

func TestNegativeIntervalsRejected(t *testing.T) {
	for name, edit := range map[string]func(*Config){
		"eval every -1":       func(c *Config) { c.Output.EvalEvery = -1 },
		"checkpoint every -1": func(c *Config) { c.Output.CheckpointEvery = -1 },
	} {
		cfg := baseConfig(t)
		edit(&cfg)
		if _, err := New(context.Background(), cfg); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: want dpcore.ErrInvalid, got %v", name, err)
		}
	}
}
