package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// WriteSealedFloats writes Seal's bytes exactly (files written before it
// stay readable, and ReadSealed reads its files), and ReadSealedFloats
// reads them back bit for bit; every flipped byte, a truncation, another
// kind, version or length is refused as corrupt.
func TestSealedFloatsStreamAsSeal(t *testing.T) {
	dir := t.TempDir()
	// More than one block, with NaN payloads, signed zeros and infinities.
	x := make([]float32, 3*floatBlock+5)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) * float32(i)
	}
	x[1], x[2], x[3] = float32(math.Copysign(0, -1)), math.Float32frombits(0x7fc00123), float32(math.Inf(-1))
	path := filepath.Join(dir, "f.bin")
	if err := WriteSealedFloats(path, "kind", 3, x); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Seal("kind", 3, AppendFloats(nil, x))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("streamed file (%d bytes) differs from Seal's (%d bytes)", len(got), len(want))
	}
	back := make([]float32, len(x))
	if err := ReadSealedFloats(path, "kind", 3, back); err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if math.Float32bits(back[i]) != math.Float32bits(x[i]) {
			t.Fatalf("value %d read back as %x, want %x", i, math.Float32bits(back[i]), math.Float32bits(x[i]))
		}
	}
	// float64 too.
	y := []float64{1, -2.5, math.Pi}
	if err := WriteSealedFloats(path, "kind", 1, y); err != nil {
		t.Fatal(err)
	}
	y2 := make([]float64, 3)
	if err := ReadSealedFloats(path, "kind", 1, y2); err != nil || y2[2] != math.Pi {
		t.Fatalf("float64: %v, %v", y2, err)
	}

	corrupt := func(name string, blob []byte, kind string, version, n int) {
		t.Helper()
		p := filepath.Join(dir, "bad.bin")
		if err := os.WriteFile(p, blob, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := ReadSealedFloats(p, kind, version, make([]float32, n)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got %v, want an error wrapping ErrCorrupt", name, err)
		}
	}
	small := []float32{1, 2, 3, 4, 5}
	good, _ := Seal("kind", 3, AppendFloats(nil, small))
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x10
		corrupt("flipped byte", b, "kind", 3, 5)
	}
	for _, k := range []int{0, 1, len(good) / 2, len(good) - 1} {
		corrupt("truncated", good[:k], "kind", 3, 5)
	}
	corrupt("trailing byte", append(bytes.Clone(good), 0), "kind", 3, 5)
	corrupt("other kind", good, "other", 3, 5)
	corrupt("other version", good, "kind", 4, 5)
	corrupt("other length", good, "kind", 3, 4)
	corrupt("text", []byte("hello\n"), "kind", 3, 5)
	if err := ReadSealedFloats(filepath.Join(dir, "missing"), "kind", 3, small); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
