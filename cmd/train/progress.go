package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dpmf-go/dpmf/train"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// terminal returns w if it is a terminal, else nil.
func terminal(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return w
	}
	return nil
}

// trainingBar draws the training steps as a progress bar on a terminal
// (schollz/progressbar handles terminal width, rate and ETA), fed by the
// run's OnStep and OnEval callbacks.
type trainingBar struct {
	w     io.Writer
	steps int
	bar   *progressbar.ProgressBar
}

// attachTrainingBar draws cfg's steps on w (nothing when w is nil),
// chaining cfg.OnStep and cfg.OnEval; call the returned function when the
// run returns.
func attachTrainingBar(cfg *train.Config, w io.Writer) (finish func()) {
	if w == nil {
		return func() {}
	}
	p := &trainingBar{w: w, steps: cfg.Privacy.Steps}
	onStep, onEval := cfg.Output.OnStep, cfg.Output.OnEval
	cfg.Output.OnStep = func(sm train.StepMetrics) {
		if onStep != nil {
			onStep(sm)
		}
		p.step(sm)
	}
	cfg.Output.OnEval = func(em train.EvalMetrics) {
		if onEval != nil {
			onEval(em)
		}
		p.eval(em)
	}
	return p.finish
}

func (p *trainingBar) step(sm train.StepMetrics) {
	if p.bar == nil {
		// The first step of this process: a resumed run starts part way.
		p.bar = progressbar.NewOptions(p.steps,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription("training"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		p.bar.Set(sm.Step - 1)
	}
	p.bar.Describe(fmt.Sprintf("loss %.3f eps %.2f", sm.Loss, sm.Epsilon))
	p.bar.Add(1)
}

func (p *trainingBar) eval(em train.EvalMetrics) {
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%s acc %.3f eps %.2f", em.Split, em.Accuracy, em.Epsilon))
	}
}

func (p *trainingBar) finish() {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}

// evalProgress writes one progress line per evaluation (and one after the
// first step, so that a slow run says its speed early) to standard error,
// whatever the terminal: step, loss, accuracy, epsilon so far, examples a
// second and the time left. Numbers computed from the private data without
// noise (the batch loss, a training-set evaluation) are marked so.
type evalProgress struct {
	w        io.Writer
	steps    int
	bar      bool // a progress bar shares the line: clear it first
	n        int  // steps run by this process
	examples int
	seconds  float64
	lastStep int
}

func newEvalProgress(w io.Writer, steps int, bar bool) *evalProgress {
	return &evalProgress{w: w, steps: steps, bar: bar}
}

func (p *evalProgress) step(sm train.StepMetrics) {
	p.n++
	p.examples += sm.BatchSize
	p.seconds += sm.StepSeconds
	p.lastStep = sm.Step
	if p.n == 1 && sm.Step < p.steps {
		p.line(fmt.Sprintf("step %d of %d: batch loss %.4f (not private), epsilon %.4g", sm.Step, p.steps, sm.Loss, sm.Epsilon))
	}
}

func (p *evalProgress) eval(em train.EvalMetrics) {
	msg := fmt.Sprintf("step %d of %d: %s loss %.4f, %s accuracy %.4f", em.Step, p.steps, em.Split, em.Loss, em.Split, em.Accuracy)
	msg += notPrivateNote(em)
	if em.Delta > 0 {
		msg += fmt.Sprintf(", epsilon %.4g", em.Epsilon)
	}
	p.line(msg)
}

// notPrivateNote marks an evaluation the guarantee does not cover.
func notPrivateNote(em train.EvalMetrics) string {
	switch {
	case len(em.NotPrivate) == 0:
		return ""
	case em.Split == train.SplitValidation:
		return " (not private: measured on examples held out of the training data)"
	}
	return " (not private: measured on the training data)"
}

func (p *evalProgress) line(msg string) {
	if p.seconds > 0 {
		msg += fmt.Sprintf(", %.0f examples/s", float64(p.examples)/p.seconds)
		left := time.Duration(float64(p.steps-p.lastStep) * p.seconds / float64(p.n) * float64(time.Second))
		msg += fmt.Sprintf(", about %s left", left.Round(time.Second))
	}
	if p.bar {
		msg = "\r\033[K" + msg
	}
	fmt.Fprintln(p.w, msg)
}

// featuresProgress writes the computing of features (train.Config's
// OnFeatures) to standard error, whatever the terminal: a line when a
// data set starts, then at most one every every, with the examples done
// and an estimate of the time left.
type featuresProgress struct {
	w     io.Writer
	every time.Duration
	set   string
	last  time.Duration // Elapsed at the last line
}

func newFeaturesProgress(w io.Writer, every time.Duration) *featuresProgress {
	return &featuresProgress{w: w, every: every}
}

func (p *featuresProgress) report(fp train.FeaturesProgress) {
	if fp.Set != p.set {
		p.set, p.last = fp.Set, 0
		fmt.Fprintf(p.w, "features: computing those of %s (%d examples; they are cached for later runs unless -cache is \"\"); progress every %v\n", fp.Set, fp.Total, p.every)
	}
	if fp.Done < fp.Total && fp.Elapsed-p.last < p.every {
		return
	}
	p.last = fp.Elapsed
	msg := fmt.Sprintf("features: %s: %d of %d examples, %s elapsed", fp.Set, fp.Done, fp.Total, fp.Elapsed.Round(time.Second))
	if fp.Done > 0 && fp.Done < fp.Total {
		left := time.Duration(float64(fp.Elapsed) * float64(fp.Total-fp.Done) / float64(fp.Done))
		msg += fmt.Sprintf(", about %s left", left.Round(time.Second))
	}
	fmt.Fprintln(p.w, msg)
}

// saveModelOrFallback writes the finished model with save to path. A run's
// privacy budget is spent: if path cannot be written (its directory was
// removed during the run, the disk is full), the model is written next to
// the checkpoint, or else in the temporary directory, and the error says
// where it is.
func saveModelOrFallback(path, checkpoint string, save func(string) error) error {
	return saveOrFallback("save-model", "model", path, checkpoint, save)
}

// saveOrFallback writes what (the model, the result JSON) with save to
// path, the value of -flagName; if that fails it is written next to the
// checkpoint, or else in the temporary directory, as path's base name
// with the time appended, and the error says where.
func saveOrFallback(flagName, what, path, checkpoint string, save func(string) error) error {
	err := save(path)
	if err == nil {
		return nil
	}
	var tried []string
	for _, dir := range fallbackDirs(checkpoint) {
		alt := filepath.Join(dir, fmt.Sprintf("%s.%d", filepath.Base(path), time.Now().Unix()))
		if ferr := save(alt); ferr == nil {
			return fmt.Errorf("-%s %s: %w; the %s was saved to %s instead", flagName, path, err, what, alt)
		}
		tried = append(tried, dir)
	}
	return fmt.Errorf("-%s %s: %w; writing it to %v failed too: the %s is lost", flagName, path, err, tried, what)
}

// fallbackDirs are where a model is saved when its own path fails: the
// checkpoint's directory, then the temporary directory.
func fallbackDirs(checkpoint string) []string {
	var dirs []string
	if checkpoint != "" {
		dirs = append(dirs, filepath.Dir(checkpoint))
	}
	if tmp := os.TempDir(); tmp != "" {
		dirs = append(dirs, tmp)
	}
	return dirs
}
