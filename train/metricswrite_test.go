package train

import (
	"bufio"
	"bytes"
	"testing"
)

// writeLog records every write that reaches the file.
type writeLog struct{ writes [][]byte }

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

// Issue 28 item 12: every write that reaches the metrics file ends with a
// newline, so a live reader never sees a torn record. Before the fix the
// buffer split records across writes whenever it filled (seen failing:
// write 1 of 4 ended mid-record).
func TestMetricsRecordsReachTheFileWhole(t *testing.T) {
	log := &writeLog{}
	m := &metricsWriter{buf: bufio.NewWriterSize(log, 512)}
	for s := 1; s <= 40; s++ {
		m.write("step", StepMetrics{Step: s, Loss: 1.25, BatchSize: 60, NotPrivate: stepNotPrivate()})
		if s%13 == 0 {
			m.write("eval", EvalMetrics{Step: s, Split: SplitTest, Accuracy: 0.5})
		}
	}
	// A record larger than the buffer goes out alone, in one write.
	m.write("eval", EvalMetrics{Step: 41, Split: SplitTest, NotPrivate: make([]string, 200)})
	if err := m.buf.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(log.writes) < 3 {
		t.Fatalf("only %d writes: the test does not exercise a full buffer", len(log.writes))
	}
	lines := 0
	for i, w := range log.writes {
		if len(w) == 0 || w[len(w)-1] != '\n' {
			t.Fatalf("write %d of %d does not end a record: ...%q", i+1, len(log.writes), w[max(0, len(w)-40):])
		}
		lines += bytes.Count(w, []byte{'\n'})
	}
	if lines != 40+3+1 {
		t.Fatalf("%d lines written, want 44", lines)
	}
}
