package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/dpmf-go/dpmf/mfnoise"

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

// buildTracer reports the building of the mechanism's factorization to a
// log: a line when an optimizer starts, a progress line with an estimate of
// the time left every progressEvery, and a line when it is done; and, once
// among the plan lines, whether a cached factorization was used. A nil
// *buildTracer does nothing.
type buildTracer struct {
	log      io.Writer
	every    time.Duration
	start    time.Time
	last     time.Time
	target   float64
	firstGap float64
	cached   []string
}

const progressEvery = 5 * time.Second

func newBuildTracer(log io.Writer) *buildTracer {
	if log == nil {
		return nil
	}
	return &buildTracer{log: log, every: progressEvery}
}

// attach returns ctx carrying the tracer to mfnoise.Build.
func (b *buildTracer) attach(ctx context.Context) context.Context {
	if b == nil {
		return ctx
	}
	return mfnoise.WithBuildTrace(ctx, &mfnoise.BuildTrace{
		Optimizing: func(kind string, n int, gap float64) {
			b.start, b.last, b.target, b.firstGap = time.Now(), time.Now(), gap, 0
			fmt.Fprintf(b.log, "factorization: optimizing %s for n = %d steps (stops at relative gap %.2g); progress every %v\n", kind, n, gap, b.every)
		},
		Progress: b.progress,
		Optimized: func(kind string, n int, elapsed time.Duration) {
			fmt.Fprintf(b.log, "factorization: %s for n = %d optimized in %.1fs\n", kind, n, elapsed.Seconds())
		},
		Cached: func(kind string, n int, path string) {
			b.cached = append(b.cached, fmt.Sprintf("%s for n = %d from %s", kind, n, path))
		},
	})
}

func (b *buildTracer) progress(p mfnoise.OptimizeProgress) {
	if p.Gap > 0 && !math.IsInf(p.Gap, 0) && b.firstGap == 0 {
		b.firstGap = p.Gap
	}
	now := time.Now()
	if now.Sub(b.last) < b.every {
		return
	}
	b.last = now
	elapsed := now.Sub(b.start)
	line := fmt.Sprintf("factorization: iteration %d, loss %.6g", p.Iter, p.Loss)
	if p.Gap > 0 && !math.IsInf(p.Gap, 0) {
		line += fmt.Sprintf(", gap %.2g (target %.2g)", p.Gap, b.target)
		if left, ok := estimateLeft(elapsed, b.firstGap, p.Gap, b.target); ok {
			line += fmt.Sprintf(", about %s left", left.Round(time.Second))
		}
	}
	fmt.Fprintf(b.log, "%s, %s elapsed\n", line, elapsed.Round(time.Second))
}

// estimateLeft extrapolates a gap that shrinks geometrically: having gone
// from first to now in elapsed, reaching target takes
// elapsed * log(now/target) / log(first/now) more.
func estimateLeft(elapsed time.Duration, first, now, target float64) (time.Duration, bool) {
	if !(first > now && now > target && target > 0) {
		return 0, false
	}
	r := math.Log(now/target) / math.Log(first/now)
	if math.IsInf(r, 0) || math.IsNaN(r) || r > 1e6 {
		return 0, false
	}
	return time.Duration(float64(elapsed) * r), true
}

// summary says, once, which factorizations came from the cache.
func (b *buildTracer) summary(w io.Writer) {
	if b == nil {
		return
	}
	for _, c := range b.cached {
		fmt.Fprintf(w, "factorization: cached %s\n", c)
	}
}
