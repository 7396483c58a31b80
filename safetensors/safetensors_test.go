package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// fixture is a file computed by hand: metadata {"k": "v"}, tensor a (F32,
// shape [2]) = [1, -2] and tensor b (F16, shape [1, 2]) = [0.5, 65504].
// The header is 135 bytes of JSON and one space of padding (136 = 0x88).
var fixture = append(append([]byte{0x88, 0, 0, 0, 0, 0, 0, 0},
	`{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[1,2],"data_offsets":[8,12]}} `...),
	0x00, 0x00, 0x80, 0x3f, // 1.0f
	0x00, 0x00, 0x00, 0xc0, // -2.0f
	0x00, 0x38, // 0.5 in F16
	0xff, 0x7b, // 65504 in F16
)

func open(t *testing.T, b []byte) *File {
	t.Helper()
	f, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestReadFixture(t *testing.T) {
	f := open(t, fixture)
	if len(f.Metadata) != 1 || f.Metadata["k"] != "v" {
		t.Errorf("metadata %v", f.Metadata)
	}
	want := map[string][]float32{"a": {1, -2}, "b": {0.5, 65504}}
	if len(f.Tensors) != 2 {
		t.Fatalf("%d tensors", len(f.Tensors))
	}
	for _, ti := range f.Tensors {
		got, err := f.Float32s(ti)
		if err != nil {
			t.Fatal(err)
		}
		if !equalBits(got, want[ti.Name]) {
			t.Errorf("%s = %v, want %v", ti.Name, got, want[ti.Name])
		}
	}
	if b, _ := f.Lookup("b"); b.DType != F16 || len(b.Shape) != 2 || b.Shape[0] != 1 || b.Shape[1] != 2 {
		t.Errorf("b: %+v", b)
	}
}

func TestWriteFixture(t *testing.T) {
	var buf bytes.Buffer
	err := Write(&buf, []Tensor{{Name: "a", Shape: []int{2}, Data: []float32{1, -2}}, {Name: "b", Shape: []int{1, 2}, DType: F16, Data: []float32{0.5, 65504}}},
		map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), fixture) {
		t.Errorf("Write made\n%q\nwant\n%q", buf.Bytes(), fixture)
	}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestRoundTrip(t *testing.T) {
	vals := []float32{0, 1, -1, 3.14159, 1e-3, -2.5e-7, 6e-5, 65504, 1e30, float32(math.Inf(-1)), math.SmallestNonzeroFloat32, math.MaxFloat32}
	scalar := []float32{42}
	in := []Tensor{
		{Name: "w.weight", Shape: []int{3, 4}, Data: vals},
		{Name: "scalar", Shape: []int{}, Data: scalar},
		{Name: "empty", Shape: []int{0, 5}, Data: nil},
		{Name: "b16", Shape: []int{12}, DType: BF16, Data: vals},
		{Name: "h", Shape: []int{6}, DType: F16, Data: vals[:8][2:]},
	}
	var buf bytes.Buffer
	if err := Write(&buf, in, map[string]string{"format": "pt", "\"odd\" key\n": "é"}); err != nil {
		t.Fatal(err)
	}
	f := open(t, buf.Bytes())
	if f.Metadata["format"] != "pt" || f.Metadata["\"odd\" key\n"] != "é" {
		t.Errorf("metadata %v", f.Metadata)
	}
	if (buf.Len()-8-int(f.buffer-8))%8 != 0 || f.buffer%8 != 0 {
		t.Errorf("buffer at %d: not aligned to 8", f.buffer)
	}
	for _, want := range in {
		ti, ok := f.Lookup(want.Name)
		if !ok {
			t.Fatalf("%s missing", want.Name)
		}
		got, err := f.Float32s(ti)
		if err != nil {
			t.Fatal(err)
		}
		exp := want.Data
		switch want.DType {
		case F16:
			exp = nil
			for _, v := range want.Data {
				exp = append(exp, f16ToF32(f32ToF16(v)))
			}
		case BF16:
			exp = nil
			for _, v := range want.Data {
				exp = append(exp, bf16ToF32(f32ToBF16(v)))
			}
		}
		if !equalBits(got, exp) && !(len(got) == 0 && len(exp) == 0) {
			t.Errorf("%s: got %v, want %v", want.Name, got, exp)
		}
	}
}

// TestHalfConversions checks F16 and BF16 against values computed by hand
// from IEEE 754 (and the bfloat16 definition: the top 16 bits of F32).
func TestHalfConversions(t *testing.T) {
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff}, {0, 0}, {float32(math.Copysign(0, -1)), 0x8000},
		{1.0 / (1 << 24), 0x0001}, // smallest subnormal
		{1.0 / (1 << 14), 0x0400}, // smallest normal
		{1023.0 / (1 << 24), 0x03ff},
		{float32(math.Inf(1)), 0x7c00},
		{1 + 1.0/1024, 0x3c01},
		{0.333251953125, 0x3555},
	} {
		if got := f32ToF16(c.f); got != c.h {
			t.Errorf("f32ToF16(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
		if got := f16ToF32(c.h); math.Float32bits(got) != math.Float32bits(c.f) {
			t.Errorf("f16ToF32(%#04x) = %g, want %g", c.h, got, c.f)
		}
	}
	// Rounding: ties to even, carries into the exponent, underflow.
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{1 + 1.0/2048, 0x3c00},    // tie, even stays
		{1 + 3.0/2048, 0x3c02},    // tie, odd rounds up
		{2 - 1.0/4096, 0x4000},    // carries into the exponent
		{65519, 0x7bff},           // still rounds to the largest
		{65520, 0x7c00},           // tie to even: infinity
		{1.0 / (1 << 25), 0},      // tie between 0 and the smallest subnormal
		{1.5 / (1 << 24), 0x0002}, // tie, odd subnormal rounds up
		{1.0 / (1 << 26), 0},      // underflow
		{float32(math.NaN()), 0x7e00},
	} {
		if got := f32ToF16(c.f); got != c.h {
			t.Errorf("f32ToF16(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	for _, c := range []struct {
		f float32
		h uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {3.140625, 0x4049},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
	} {
		if got := f32ToBF16(c.f); got != c.h {
			t.Errorf("f32ToBF16(%g) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	if v := bf16ToF32(f32ToBF16(float32(math.NaN()))); !math.IsNaN(float64(v)) {
		t.Errorf("BF16 NaN became %g", v)
	}
}

func TestReadF64I64(t *testing.T) {
	hdr := `{"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"i":{"dtype":"I64","shape":[2],"data_offsets":[16,32]}}`
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	b = append(b, hdr...)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(0.1))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(-1e300))
	b = binary.LittleEndian.AppendUint64(b, uint64(3))
	b = binary.LittleEndian.AppendUint64(b, uint64(1<<63)) // -2^63
	f := open(t, b)
	d, _ := f.Lookup("d")
	i, _ := f.Lookup("i")
	gd, err1 := f.Float32s(d)
	gi, err2 := f.Float32s(i)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if !equalBits(gd, []float32{0.1, float32(math.Inf(-1))}) || !equalBits(gi, []float32{3, -(1 << 63)}) {
		t.Errorf("F64 %v, I64 %v", gd, gi)
	}
}

// file builds a safetensors file from a header and a buffer of n bytes.
func file(hdr string, n int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(b, hdr...), make([]byte, n)...)
}

func TestBadFiles(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	longLen := binary.LittleEndian.AppendUint64(nil, 1<<62)
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "shorter than the 8-byte header length"},
		{"header beyond the file", append(longLen, "{}"...), "beyond the end of the file"},
		{"truncated header", file(ok, 8)[:20], "beyond the end of the file"},
		{"not JSON", file(`{"a":`, 0), "unexpected end"},
		{"not JSON at all", file(`{x}`, 0), "header is not JSON"},
		{"not an object", file(`[1,2]`, 0), "does not start with '{'"},
		{"garbage after", file(`{} x`, 0), "after its JSON object"},
		{"duplicate", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `"a": named twice`},
		{"duplicate metadata", file(`{"__metadata__":{},"__metadata__":{}}`, 0), "named twice"},
		{"metadata not strings", file(`{"__metadata__":{"k":1}}`, 0), "not an object of strings"},
		{"entry not an object", file(`{"a":3}`, 0), "not an object of dtype"},
		{"missing field", file(`{"a":{"dtype":"F32","shape":[2]}}`, 8), "wants dtype, shape and data_offsets"},
		{"unknown dtype", file(`{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}`, 8), `unknown dtype "Q4"`},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, 8), "not an object of dtype"},
		{"offsets beyond the buffer", file(ok, 4), "out of the buffer's bounds"},
		{"offsets reversed", file(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, 8), "out of the buffer's bounds"},
		{"three offsets", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}`, 8), "has 3 entries"},
		{"size not shape", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), "hold 8 bytes, but F32 [3] takes 12"},
		{"size not dtype", file(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}}`, 8), "hold 8 bytes, but F16 [2] takes 4"},
		{"dims overflow", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296,4],"data_offsets":[0,0]}}`, 0), "more elements than"},
		{"dims overflow to the size", file(`{"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}}`, 0), "more elements than"},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), `"b": data_offsets [4, 8] overlap`},
		{"hole", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, 12), "leave a hole"},
		{"hole at the start", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8), "leave a hole"},
		{"buffer not covered", file(ok, 12), "cover 8 bytes of a 12-byte buffer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(bytes.NewReader(c.b), int64(len(c.b)))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line wrapping ErrFormat with %q", err, c.want)
			}
		})
	}
}

// A header over the cap is refused before it is read or allocated (the
// reader holds only the length; the file claims to be larger).
func TestHeaderCap(t *testing.T) {
	b := binary.LittleEndian.AppendUint64(nil, MaxHeader+1)
	_, err := Open(bytes.NewReader(b), 1<<40)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "over the cap of 100000000 bytes") {
		t.Errorf("error %v", err)
	}
}

// A reader whose size lies (a file truncated after Open) fails on read.
func TestTruncatedAfterOpen(t *testing.T) {
	b := file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8)
	f, err := Open(bytes.NewReader(b[:len(b)-4]), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Lookup("a")
	if _, err := f.Float32s(a); !errors.Is(err, ErrFormat) {
		t.Errorf("read of a truncated file: %v", err)
	}
}

func TestWriteRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		ts   []Tensor
	}{
		{"duplicate", []Tensor{{Name: "a", Shape: []int{1}, Data: []float32{1}}, {Name: "a", Shape: []int{1}, Data: []float32{1}}}},
		{"reserved", []Tensor{{Name: MetadataKey, Shape: []int{1}, Data: []float32{1}}}},
		{"shape", []Tensor{{Name: "a", Shape: []int{2}, Data: []float32{1}}}},
		{"dtype", []Tensor{{Name: "a", Shape: []int{1}, DType: I64, Data: []float32{1}}}},
		{"F16 overflow", []Tensor{{Name: "a", Shape: []int{1}, DType: F16, Data: []float32{70000}}}},
		{"bad UTF-8", []Tensor{{Name: "a\xff", Shape: []int{1}, Data: []float32{1}}}},
	} {
		if err := Write(&bytes.Buffer{}, c.ts, nil); err == nil {
			t.Errorf("%s: written", c.name)
		}
	}
}
