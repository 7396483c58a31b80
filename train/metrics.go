package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// stepNotPrivate lists the keys of a step's metrics that are computed from
// the private batch without noise.
func stepNotPrivate() []string {
	return []string{"loss", "batch_size", "clipped_frac", "norm_quantiles", "non_finite"}
}

// StepMetrics describes one training step.
type StepMetrics struct {
	Step          int        `json:"step"`
	Loss          float64    `json:"loss"`
	BatchSize     int        `json:"batch_size"`
	ClippedFrac   float64    `json:"clipped_frac"`
	NormQuantiles [4]float64 `json:"norm_quantiles"` // 50%, 90%, 99%, max
	NonFinite     int        `json:"non_finite"`
	// Epsilon bounds the epsilon spent after this step (Plan.EpsilonSpent):
	// never below it, exact at the end.
	Epsilon     float64 `json:"epsilon"`
	StepSeconds float64 `json:"step_seconds"`
	// ClipNorm is the step's clip norm under adaptive clipping (a function
	// of released counts), else 0.
	ClipNorm float64 `json:"clip_norm,omitempty"`
	// NotPrivate lists the keys computed from the private batch without
	// noise, which the guarantee does not cover: loss, batch_size,
	// clipped_frac, norm_quantiles and non_finite. Keep them as private as
	// the training data (or drop them) before releasing a run's metrics.
	NotPrivate []string `json:"not_private"`
}

// EvalMetrics describes one evaluation: on the test set, or on the
// training set when the run has none.
type EvalMetrics struct {
	Step int `json:"step"`
	// Split is SplitTest, SplitValidation or SplitTrain. A training-set
	// evaluation is written with the keys train_loss and train_accuracy
	// (never test_*) and lists them under not_private: it reads the
	// private data without noise, outside the guarantee. A validation
	// evaluation (examples held out of the private training data) lists
	// its test_loss and test_accuracy there too.
	Split    string  `json:"split"`
	Loss     float64 `json:"test_loss"`
	Accuracy float64 `json:"test_accuracy"`
	Epsilon  float64 `json:"epsilon"`
	Delta    float64 `json:"delta"`
	// NotPrivate lists the keys the guarantee does not cover.
	NotPrivate []string `json:"not_private,omitempty"`
}

// Evaluation splits. SplitValidation is a test set held out of the
// training data (Config.Validation); it is written with the test_* keys.
const (
	SplitTest       = "test"
	SplitTrain      = "train"
	SplitValidation = "validation"
)

// MarshalJSON names loss and accuracy after the split they were measured
// on: test_loss and test_accuracy, or train_loss and train_accuracy.
func (em EvalMetrics) MarshalJSON() ([]byte, error) {
	type plain EvalMetrics
	if em.Split != SplitTrain {
		return json.Marshal(plain(em))
	}
	return json.Marshal(struct {
		Step       int      `json:"step"`
		Split      string   `json:"split"`
		Loss       float64  `json:"train_loss"`
		Accuracy   float64  `json:"train_accuracy"`
		Epsilon    float64  `json:"epsilon"`
		Delta      float64  `json:"delta"`
		NotPrivate []string `json:"not_private"`
	}{em.Step, em.Split, em.Loss, em.Accuracy, em.Epsilon, em.Delta, em.NotPrivate})
}

// evalTrainNotPrivate lists the keys of a training-set evaluation.
func evalTrainNotPrivate() []string { return []string{"train_loss", "train_accuracy"} }

// evalValidationNotPrivate lists the keys of a validation evaluation: a
// split held out of the private training data is private data too.
func evalValidationNotPrivate() []string { return []string{"test_loss", "test_accuracy"} }

// metricsWriter appends one JSON object per line: {"kind":"step",...} or
// {"kind":"eval",...}. Keys are those of StepMetrics and EvalMetrics.
//
// The file is kept consistent with the checkpoint: Run syncs it before
// every checkpoint, so it holds at least every record up to the
// checkpoint's step; on resume it is truncated back to that step (dropping
// a line torn by a kill and the records of steps that are run again), so
// that every line parses and every step appears once.
type metricsWriter struct {
	path string
	f    *os.File
	buf  *bufio.Writer
	err  error
	// pending: opened to resume, not yet truncated to the resume point.
	pending bool
	// slow widens the window of a torn line for crash tests
	// (Config.slowWrite).
	slow time.Duration
}

// openMetrics creates (or, to resume a run, opens) the metrics file.
// slow is zero outside crash tests.
func openMetrics(path string, appendTo bool, slow time.Duration) (*metricsWriter, error) {
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_CREATE | os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("train: metrics: %w", err)
	}
	return &metricsWriter{path: path, f: f, buf: bufio.NewWriter(f), pending: appendTo, slow: slow}, nil
}

// metricsRecord is the part of a metrics line that resuming reads.
type metricsRecord struct {
	Kind string `json:"kind"`
	Step int    `json:"step"`
}

// metricsResume is what resuming found in the metrics file.
type metricsResume struct {
	Evals    []EvalMetrics // evaluations kept, in order
	LastStep int           // last step recorded (0: none)
	Dropped  int           // lines dropped (torn, or past the resume point)
}

// resume truncates the file after the records of the first step steps: step
// lines up to step, evaluation lines up to step (before step if final,
// because the final evaluation is run again). It stops at the first line
// that does not parse or breaks the sequence of steps.
func (m *metricsWriter) resume(step int, final bool) (metricsResume, error) {
	var r metricsResume
	if !m.pending {
		return r, m.err
	}
	m.pending = false
	if _, err := m.f.Seek(0, io.SeekStart); err != nil {
		m.err = err
		return r, fmt.Errorf("train: metrics %s: %w", m.path, err)
	}
	all, err := io.ReadAll(m.f)
	if err != nil {
		m.err = err
		return r, fmt.Errorf("train: metrics %s: %w", m.path, err)
	}
	var keep int64
	rest := all
	for len(rest) > 0 {
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			break // a line torn by a kill
		}
		line := rest[:nl]
		var rec metricsRecord
		if json.Unmarshal(line, &rec) != nil {
			break
		}
		ok := false
		switch rec.Kind {
		case "step":
			ok = rec.Step <= step && (r.LastStep == 0 && rec.Step >= 1 || rec.Step == r.LastStep+1)
		case "eval":
			var em EvalMetrics
			ok = rec.Step <= step && !(final && rec.Step == step) && rec.Step >= r.LastStep &&
				json.Unmarshal(line, &em) == nil
			if ok {
				r.Evals = append(r.Evals, em)
			}
		}
		if !ok {
			break
		}
		if rec.Kind == "step" {
			r.LastStep = rec.Step
		}
		keep += int64(nl) + 1
		rest = rest[nl+1:]
	}
	total := bytes.Count(rest, []byte{'\n'})
	if len(rest) > 0 && rest[len(rest)-1] != '\n' {
		total++
	}
	r.Dropped = total
	if err := m.f.Truncate(keep); err != nil {
		m.err = err
		return r, fmt.Errorf("train: metrics %s: %w", m.path, err)
	}
	if _, err := m.f.Seek(keep, io.SeekStart); err != nil {
		m.err = err
		return r, fmt.Errorf("train: metrics %s: %w", m.path, err)
	}
	if err := m.f.Sync(); err != nil {
		m.err = err
		return r, fmt.Errorf("train: metrics %s: %w", m.path, err)
	}
	return r, nil
}

func (m *metricsWriter) write(kind string, v any) {
	if m.pending {
		// A Trainer driven without Run resumes on its first record.
		step, final := 0, false
		switch x := v.(type) {
		case StepMetrics:
			step = x.Step - 1
		case EvalMetrics:
			step, final = x.Step, true
		}
		m.resume(step, final)
	}
	if m.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		m.err = err
		return
	}
	// Splice the kind in front of the object's own keys.
	line := fmt.Appendf(nil, "{\"kind\":%q,%s\n", kind, b[1:])
	if m.slow > 0 {
		half := len(line) / 2
		m.buf.Write(line[:half])
		m.buf.Flush()
		time.Sleep(m.slow)
		line = line[half:]
	}
	// Each record reaches the file in one write of whole lines: a live
	// reader (a plot, a dashboard) and a kill see complete records only.
	if m.buf.Buffered() > 0 && m.buf.Available() < len(line) {
		if m.err = m.buf.Flush(); m.err != nil {
			return
		}
	}
	m.buf.Write(line)
	if kind == "eval" {
		m.err = m.buf.Flush()
	}
}

// sync makes every record written so far durable; Run calls it before each
// checkpoint, so the file never lags behind the checkpoint.
func (m *metricsWriter) sync() error {
	if m.err == nil {
		m.err = m.buf.Flush()
	}
	if m.err == nil {
		m.err = m.f.Sync()
	}
	if m.err != nil {
		return fmt.Errorf("train: metrics: %w", m.err)
	}
	return nil
}

func (m *metricsWriter) close() error {
	if err := m.buf.Flush(); err != nil && m.err == nil {
		m.err = err
	}
	if err := m.f.Close(); err != nil && m.err == nil {
		m.err = err
	}
	if m.err != nil {
		return fmt.Errorf("train: metrics: %w", m.err)
	}
	return nil
}
