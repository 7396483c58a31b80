package train

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
)

// metricsWriter appends one JSON object per line: {"kind":"step",...} or
// {"kind":"eval",...}. Keys are those of StepMetrics and EvalMetrics.
type metricsWriter struct {
	f   *os.File
	buf *bufio.Writer
	err error
}

func openMetrics(path string, appendTo bool) (*metricsWriter, error) {
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("train: metrics: %w", err)
	}
	return &metricsWriter{f: f, buf: bufio.NewWriter(f)}, nil
}

func (m *metricsWriter) write(kind string, v any) {
	if m.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		m.err = err
		return
	}
	// Splice the kind in front of the object's own keys.
	fmt.Fprintf(m.buf, "{\"kind\":%q,%s\n", kind, b[1:])
	if kind == "eval" {
		m.err = m.buf.Flush()
	}
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

// progress draws a terminal progress bar (schollz/progressbar handles
// terminal width, rate and ETA) or does nothing when w is nil.
type progress struct{ bar *progressbar.ProgressBar }

func newProgress(w io.Writer, steps, done int) *progress {
	if w == nil {
		return &progress{}
	}
	bar := progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("training"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100_000_000),
		progressbar.OptionClearOnFinish(),
	)
	bar.Set(done)
	return &progress{bar: bar}
}

func (p *progress) step(sm StepMetrics) {
	if p.bar == nil {
		return
	}
	p.bar.Describe(fmt.Sprintf("loss %.3f eps %.2f", sm.Loss, sm.Epsilon))
	p.bar.Add(1)
}

func (p *progress) eval(em EvalMetrics) {
	if p.bar == nil {
		return
	}
	p.bar.Describe(fmt.Sprintf("%s acc %.3f eps %.2f", em.Split, em.Accuracy, em.Epsilon))
}

func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}
