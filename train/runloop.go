package train

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// checkOutputs refuses, before any long work, a checkpoint or metrics path
// that cannot be written.
func checkOutputs(cfg *Config) error {
	for _, o := range []struct{ what, path string }{{"checkpoint", cfg.CheckpointPath}, {"metrics", cfg.MetricsPath}} {
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
	return t.SaveCheckpoint(t.cfg.CheckpointPath)
}

// interrupted saves a checkpoint at the interrupt (when the run has a
// checkpoint path) and returns the error that says how to resume.
func (t *Trainer) interrupted(ctx context.Context) error {
	step := t.Step()
	if t.cfg.CheckpointPath == "" {
		if t.metrics != nil {
			t.metrics.sync()
		}
		return fmt.Errorf("train: %w at step %d of %d; no checkpoint path was given, so the run cannot be resumed: %w", ErrInterrupted, step, t.cfg.Steps, ctx.Err())
	}
	if err := t.checkpoint(); err != nil {
		return fmt.Errorf("train: %w at step %d of %d, and saving the checkpoint failed: %w", ErrInterrupted, step, t.cfg.Steps, err)
	}
	return fmt.Errorf("train: %w at step %d of %d; checkpoint saved to %s: run the same command again to resume from step %d: %w",
		ErrInterrupted, step, t.cfg.Steps, t.cfg.CheckpointPath, step, ctx.Err())
}

// resumeLog truncates the metrics file back to the checkpoint, keeps the
// evaluations recorded before it and says that and from where the run
// resumed.
func resumeLog(t *Trainer, res *Result) error {
	log := t.cfg.Log
	if log != nil {
		fmt.Fprintf(log, "resumed from checkpoint %s at step %d of %d\n", t.cfg.CheckpointPath, res.Resumed, t.cfg.Steps)
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
			fmt.Fprintf(log, "metrics: %s truncated back to step %d (%d lines past the checkpoint or torn dropped)\n", t.cfg.MetricsPath, res.Resumed, mr.Dropped)
		}
		if mr.LastStep < res.Resumed {
			fmt.Fprintf(log, "metrics: %s records steps up to %d only: steps %d to %d were not recorded\n", t.cfg.MetricsPath, mr.LastStep, mr.LastStep+1, res.Resumed)
		}
	}
	return nil
}
