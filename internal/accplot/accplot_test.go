package accplot

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestReadMarks(t *testing.T) {
	ms, err := ReadMarks(filepath.Join("..", "..", "configs", "fashion-marks.json"))
	if err != nil || len(ms) != 3 || ms[0].Epsilon != 3 || ms[0].Accuracy != 0.897 {
		t.Fatalf("shipped marks: %v %v", ms, err)
	}
	dir := t.TempDir()
	for _, bad := range []string{`{}`, `[{"label":"x","epsilon":3,"accuracy":89.7}]`, `[{"epsilon":3,"accuracy":0.5}]`, `[{"label":"x","epsilon":0,"accuracy":0.5}]`} {
		p := filepath.Join(dir, "m.json")
		os.WriteFile(p, []byte(bad), 0o644)
		if _, err := ReadMarks(p); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestSummary(t *testing.T) {
	mean, lo, hi := Summary([]float64{3, 1, 2})
	if mean != 2 || lo != 1 || hi != 3 {
		t.Errorf("Summary: %v %v %v", mean, lo, hi)
	}
	if m, _, _ := Summary(nil); !math.IsNaN(m) {
		t.Errorf("empty: %v", m)
	}
}
