package atomicfile

import (
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type testState struct {
	Step int    `msgpack:"step"`
	Buf  []byte `msgpack:"buf"`
}

func TestStateRoundTripVersionsAndKinds(t *testing.T) {
	x := []float64{1, -0.5, math.Inf(1), math.Copysign(0, -1), math.Float64frombits(0x7ff8000000000123)}
	in := testState{Step: 7, Buf: AppendFloats(nil, x)}
	blob, err := MarshalState("test-state", 2, &in)
	if err != nil {
		t.Fatal(err)
	}
	var out testState
	if err := UnmarshalState(blob, "test-state", 2, &out); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeFloats[float64](out.Buf, len(x))
	if err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if math.Float64bits(got[i]) != math.Float64bits(x[i]) {
			t.Fatalf("value %d: %x, want %x", i, math.Float64bits(got[i]), math.Float64bits(x[i]))
		}
	}
	if out.Step != 7 {
		t.Fatalf("step %d", out.Step)
	}
	for _, c := range []struct {
		magic    string
		lo, hi   int
		wantText string
	}{
		{"test-state", 3, 3, "version 2, this build reads version 3"},
		{"test-state", 3, 5, "version 2, this build reads versions 3 to 5"},
		{"other", 2, 2, `not a other file (kind "test-state")`},
	} {
		_, err := OpenVersions(blob, c.magic, c.lo, c.hi)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.wantText) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, _, err := OpenAny(append(slices.Clone(blob), 0), "test-state"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not a test-state file (1 bytes after the end of its envelope)") {
		t.Errorf("trailing byte: %v", err)
	}
	if p, v, err := OpenAny(blob, "test-state"); err != nil || v != 2 || len(p) == 0 {
		t.Fatalf("OpenAny: version %d, %v", v, err)
	}
	path := filepath.Join(t.TempDir(), "s")
	if err := WriteState(path, "test-state", 2, &in); err != nil {
		t.Fatal(err)
	}
	var again testState
	if err := ReadState(path, "test-state", 2, &again); err != nil || again.Step != 7 || !slices.Equal(again.Buf, in.Buf) {
		t.Fatalf("file round trip: %+v, %v", again, err)
	}
}

func TestFloatsCodec(t *testing.T) {
	x32 := []float32{1.5, -2, float32(math.NaN())}
	b := AppendFloats([]byte{9}, x32)
	if len(b) != 1+12 {
		t.Fatalf("%d bytes", len(b))
	}
	dst := make([]float32, 3)
	rest, err := ReadFloats(dst, b[1:])
	if err != nil || len(rest) != 0 {
		t.Fatal(rest, err)
	}
	for i := range x32 {
		if math.Float32bits(dst[i]) != math.Float32bits(x32[i]) {
			t.Fatalf("float32 %d", i)
		}
	}
	// Bytes as the hand-written codecs laid them out: little-endian IEEE.
	if got := AppendFloats(nil, []float64{1}); !slices.Equal(got, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}) {
		t.Fatalf("1.0 encodes as % x", got)
	}
	type named float32
	if got := AppendFloats(nil, []named{1}); !slices.Equal(got, []byte{0, 0, 0x80, 0x3f}) {
		t.Fatalf("named float32 1.0 encodes as % x", got)
	}
	if _, err := ReadFloats(make([]float64, 2), make([]byte, 15)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short buffer: %v", err)
	}
	if _, err := DecodeFloats[float32](make([]byte, 9), 2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ragged buffer: %v", err)
	}
	// 4 * (2^62 + 1) wraps to 4: the count must not be trusted.
	if _, err := DecodeFloats[float32](make([]byte, 4), 1<<62+1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("overflowing count: %v", err)
	}
	// FloatBytes gives AppendFloats's bytes, for either width.
	if got := FloatBytes(x32); !slices.Equal(got, AppendFloats(nil, x32)) {
		t.Fatalf("FloatBytes float32: % x", got)
	}
	x64 := []float64{1, -0.0, math.Inf(-1)}
	if got := FloatBytes(x64); !slices.Equal(got, AppendFloats(nil, x64)) {
		t.Fatalf("FloatBytes float64: % x", got)
	}
	if got := FloatBytes([]float32{}); len(got) != 0 {
		t.Fatalf("FloatBytes of nothing: % x", got)
	}
}
