package train

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/privacy"
)

// Result summarizes a finished run.
type Result struct {
	Plan     *privacy.Plan `json:"plan,omitempty"`
	Steps    int           `json:"steps"`
	Final    EvalMetrics   `json:"final"`
	Evals    []EvalMetrics `json:"evals"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Resumed  int           `json:"resumed_from_step,omitempty"`
	Model    string        `json:"model"`
	Examples int           `json:"examples"`
	// Users is the number of users of a user-level run (0 otherwise).
	Users int `json:"users,omitempty"`
	// Features says, per data set, whether its features (Data.Features)
	// were computed or read from the cache, and in how long (none without
	// features).
	Features []FeaturesDone `json:"features,omitempty"`
}

// Run trains to the end (resuming from cfg.Output.CheckpointPath when a
// checkpoint is there), evaluating every cfg.Output.EvalEvery steps and at
// the end, and checkpointing every cfg.Output.CheckpointEvery steps: both
// are hooks after each step (hooks.go), after the trainer's own.
//
// Every output path is checked before the plan is built. On resume the
// metrics file is truncated back to the checkpoint's step and the
// evaluations recorded before it are kept in the Result. When ctx is
// cancelled (SIGINT, SIGTERM) Run finishes the step under way, saves a
// checkpoint and returns an error wrapping ErrInterrupted that says from
// which step the run resumes.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	if err := checkOutputs(&cfg.Output); err != nil {
		return nil, err
	}
	t, err := New(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("train: %w before the first step (while building the plan; nothing to save): %w", ErrInterrupted, ctx.Err())
		}
		return nil, err
	}
	defer t.Close()
	out := t.cfg.Output
	res := &Result{Plan: t.plan, Resumed: t.Step(), Model: t.backend.Name(), Examples: t.cfg.Data.Train.Len(), Features: t.features}
	if t.users != nil {
		res.Users = t.users.users.Len()
	}
	if out.Log != nil && t.plan != nil {
		fmt.Fprintln(out.Log, t.plan)
	}
	if why := slowPath(t.backend); out.Log != nil && why != "" {
		fmt.Fprintln(out.Log, why)
	}
	if res.Resumed > 0 {
		if err := resumeLog(t, res); err != nil {
			return res, err
		}
	}
	loop := []Hook{evalHook{t: t, every: out.EvalEvery, evals: &res.Evals}}
	if out.CheckpointPath != "" {
		loop = append(loop, checkpointHook{t: t, every: out.CheckpointEvery})
	}
	// stop is the error that ends the run: an interrupt saves a
	// checkpoint and says how to resume.
	stop := func(err error) error {
		if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
			return t.interrupted(ctx)
		}
		return err
	}
	for !t.Done() {
		if ctx.Err() != nil {
			return res, stop(nil)
		}
		sm, err := t.TrainStep(ctx)
		for _, h := range loop {
			if err != nil {
				break
			}
			err = h.AfterStep(ctx, sm, t.engine.Params())
		}
		if err != nil {
			return res, stop(err)
		}
	}
	em, err := t.EvaluateContext(ctx)
	if err != nil {
		return res, stop(err)
	}
	res.Evals = append(res.Evals, em)
	res.Final, res.Steps, res.Elapsed = em, t.Step(), time.Since(start)
	if out.CheckpointPath != "" {
		if err := t.checkpoint(); err != nil {
			return res, err
		}
	}
	// The model leaves Run holding what was evaluated: the average.
	t.ema.install(t.engine.Params())
	return res, nil
}

// checkOutputs refuses, before any long work, a checkpoint or metrics path
// that cannot be written.
func checkOutputs(out *Output) error {
	for _, o := range []struct{ what, path string }{{"checkpoint", out.CheckpointPath}, {"metrics", out.MetricsPath}} {
		if o.path == "" {
			continue
		}
		if err := atomicfile.CheckWritable(o.path); err != nil {
			return invalidf("%s file %s is not writable: %v", o.what, o.path, err)
		}
	}
	return nil
}

// checkpoint makes the metrics durable and then saves the checkpoint, so
// the metrics file always reaches at least the checkpoint's step.
func (t *Trainer) checkpoint() error {
	if t.metrics != nil {
		if err := t.metrics.sync(); err != nil {
			return err
		}
	}
	return t.SaveCheckpoint(t.cfg.Output.CheckpointPath)
}

// interrupted saves a checkpoint at the interrupt (when the run has a
// checkpoint path) and returns the error that says how to resume.
func (t *Trainer) interrupted(ctx context.Context) error {
	step := t.Step()
	if t.cfg.Output.CheckpointPath == "" {
		if t.metrics != nil {
			t.metrics.sync()
		}
		return fmt.Errorf("train: %w at step %d of %d; no checkpoint path was given, so the run cannot be resumed: %w", ErrInterrupted, step, t.cfg.Privacy.Steps, ctx.Err())
	}
	if err := t.checkpoint(); err != nil {
		return fmt.Errorf("train: %w at step %d of %d, and saving the checkpoint failed: %w", ErrInterrupted, step, t.cfg.Privacy.Steps, err)
	}
	return fmt.Errorf("train: %w at step %d of %d; checkpoint saved to %s: run the same command again to resume from step %d: %w",
		ErrInterrupted, step, t.cfg.Privacy.Steps, t.cfg.Output.CheckpointPath, step, ctx.Err())
}

// resumeLog truncates the metrics file back to the checkpoint, keeps the
// evaluations recorded before it and says that and from where the run
// resumed.
func resumeLog(t *Trainer, res *Result) error {
	log := t.cfg.Output.Log
	if log != nil {
		fmt.Fprintf(log, "resumed from checkpoint %s at step %d of %d\n", t.cfg.Output.CheckpointPath, res.Resumed, t.cfg.Privacy.Steps)
	}
	if t.metrics == nil {
		return nil
	}
	mr, err := t.metrics.resume(t.Step(), t.Done())
	if err != nil {
		return err
	}
	res.Evals = append(res.Evals, mr.Evals...)
	if log != nil {
		if mr.Dropped > 0 {
			fmt.Fprintf(log, "metrics: %s truncated back to step %d (%d lines past the checkpoint or torn dropped)\n", t.cfg.Output.MetricsPath, res.Resumed, mr.Dropped)
		}
		if mr.LastStep < res.Resumed {
			fmt.Fprintf(log, "metrics: %s records steps up to %d only: steps %d to %d were not recorded\n", t.cfg.Output.MetricsPath, mr.LastStep, mr.LastStep+1, res.Resumed)
		}
	}
	return nil
}

// evalHook evaluates every `every` steps before the last (Run evaluates
// the last itself) and keeps the evaluations.
type evalHook struct {
	t     *Trainer
	every int
	evals *[]EvalMetrics
}

func (e evalHook) AfterStep(ctx context.Context, sm StepMetrics, _ []float32) error {
	t := e.t
	if sm.Step%e.every != 0 || sm.Step >= t.cfg.Privacy.Steps {
		return nil
	}
	em, err := t.EvaluateContext(ctx)
	if err != nil {
		return err
	}
	*e.evals = append(*e.evals, em)
	return nil
}

// checkpointHook saves a checkpoint every `every` steps.
type checkpointHook struct {
	t     *Trainer
	every int
}

func (c checkpointHook) AfterStep(_ context.Context, sm StepMetrics, _ []float32) error {
	t := c.t
	if c.every > 0 && sm.Step%c.every == 0 {
		return t.checkpoint()
	}
	return nil
}
