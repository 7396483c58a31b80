package atomicfile

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestSealedRoundTripAndEveryFlippedBitIsCaught(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	payload := []byte("the complete state of a run")
	if err := WriteSealed(path, "test-state", 3, payload); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSealed(path, "test-state", 3)
	if err != nil || string(got) != string(payload) {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	if _, err := ReadSealed(path, "other-state", 3); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong kind: %v", err)
	}
	if _, err := ReadSealed(path, "test-state", 2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong version: %v", err)
	}
	blob, _ := Seal("test-state", 3, payload)
	for i := range blob {
		for bit := 0; bit < 8; bit++ {
			b := append([]byte(nil), blob...)
			b[i] ^= 1 << bit
			if p, err := Open(b, "test-state", 3); err == nil {
				t.Fatalf("byte %d bit %d flipped: accepted payload %q", i, bit, p)
			}
		}
	}
}
