package replica

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestFormatLogEntry3258d09: a contribution as the release at commit
// 3258d09 put it in the replicated log decodes to its id and vector.
func TestFormatLogEntry3258d09(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "formats", "log-entry-3258d09.bin"))
	if err != nil {
		t.Fatal(err)
	}
	id, vec, err := decodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if id != "contributor-7" || !slices.Equal(vec, []float64{0.25, -1.5, 3e-300}) {
		t.Fatalf("entry %q %v", id, vec)
	}
}
