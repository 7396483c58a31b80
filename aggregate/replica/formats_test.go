package replica

import (
	"bytes"
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

// FuzzDecodeEntry: a log entry of any bytes decodes or fails without a
// panic, and what encodeEntry writes decodes to the same id and vector,
// bit for bit.
func FuzzDecodeEntry(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "formats", "log-entry-3258d09.bin")); err == nil {
		f.Add(b)
	}
	f.Add(encodeEntry("u", []float64{0.5, -1}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, vec, err := decodeEntry(b)
		if err != nil {
			return
		}
		again := encodeEntry(id, vec)
		if !bytes.Equal(again, b) {
			t.Fatalf("entry %x decodes to %q %v, which encodes to %x", b, id, vec, again)
		}
	})
}
