package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// npyBytes is a .npy file (version 1.0) with this type string, shape
// (written as NumPy writes it) and data.
func npyBytes(dtype, shape string, data []byte) []byte {
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", dtype, shape)
	pad := 64 - (10+len(h)+1)%64
	h += strings.Repeat(" ", pad%64) + "\n"
	b := []byte("\x93NUMPY\x01\x00")
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h)))
	return append(append(b, h...), data...)
}

// TestDecodeNPY reads arrays of every supported kind exactly: unsigned
// bytes, big-endian int16, little-endian int64 and float32, version 2.0.
func TestDecodeNPY(t *testing.T) {
	i16 := binary.BigEndian.AppendUint16(nil, uint16(0xfffe)) // -2
	i16 = binary.BigEndian.AppendUint16(i16, 300)
	var i64 []byte
	for _, v := range []int64{7, -1} {
		i64 = binary.LittleEndian.AppendUint64(i64, uint64(v))
	}
	f4 := binary.LittleEndian.AppendUint32(nil, 0x3fc00000) // 1.5
	v2 := npyBytes("<f4", "(1,)", f4)
	v2 = append([]byte("\x93NUMPY\x02\x00"), binary.LittleEndian.AppendUint32(nil, uint32(binary.LittleEndian.Uint16(v2[8:])))...)
	v2 = append(v2, npyBytes("<f4", "(1,)", f4)[10:]...)
	for _, c := range []struct {
		name  string
		b     []byte
		shape []int
		want  []float32
		isInt bool
	}{
		{"u1", npyBytes("|u1", "(2, 2)", []byte{0, 1, 254, 255}), []int{2, 2}, []float32{0, 1, 254, 255}, true},
		{">i2", npyBytes(">i2", "(2,)", i16), []int{2}, []float32{-2, 300}, true},
		{"<i8", npyBytes("<i8", "(2,)", i64), []int{2}, []float32{7, -1}, true},
		{"<f4 v2", v2, []int{1}, []float32{1.5}, false},
		{"scalar", npyBytes("<f4", "()", f4), nil, []float32{1.5}, false},
	} {
		a, err := DecodeNPY(bytes.NewReader(c.b))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if fmt.Sprint(a.Shape) != fmt.Sprint(c.shape) || fmt.Sprint(a.Values) != fmt.Sprint(c.want) || a.Integer != c.isInt {
			t.Errorf("%s: shape %v values %v integer %v, want %v %v %v", c.name, a.Shape, a.Values, a.Integer, c.shape, c.want, c.isInt)
		}
	}
}

// TestDecodeNPYRefuses: every malformed file is one error wrapping
// ErrFormat that says what is wrong; a header declaring 10^8 elements over
// a few bytes is refused as truncated without allocating for them.
func TestDecodeNPYRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "truncated header"},
		{"magic", []byte("\x93NUMPX\x01\x00\x00\x00"), "wrong magic"},
		{"version", []byte("\x93NUMPY\x04\x00\x00\x00"), "version 4.0"},
		{"header cut", []byte("\x93NUMPY\x01\x00\x40\x00{'descr'"), "truncated header"},
		{"fortran", bytes.Replace(npyBytes("<f4", "(1,)", make([]byte, 4)), []byte("False"), []byte("True "), 1), "Fortran-order"},
		{"complex", npyBytes("<c8", "(1,)", make([]byte, 8)), `element type "<c8"`},
		{"object", npyBytes("|O", "(1,)", make([]byte, 8)), `element type "|O"`},
		{"truncated", npyBytes("<f4", "(3,)", make([]byte, 8)), "truncated: 8 of 12"},
		{"oversized", npyBytes("<f4", "(1,)", make([]byte, 8)), "oversized"},
		{"negative", npyBytes("<f4", "(-1,)", nil), "shape dimension"},
		{"too many", npyBytes("|u1", "(100000, 100000)", nil), "more than"},
		{"no shape", append([]byte("\x93NUMPY\x01\x00\x29\x00"), "{'descr': '<f4', 'fortran_order': False}\n"...), "lacks"},
		{"unknown key", npyBytes("<f4", "(1,), 'x': 1", make([]byte, 4)), `unknown key "x"`},
	} {
		_, err := DecodeNPY(bytes.NewReader(c.b))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want ErrFormat saying %q", c.name, err, c.want)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := DecodeNPY(bytes.NewReader(npyBytes("<f4", "(100000000,)", make([]byte, 16))))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("10^8 declared elements over 16 bytes: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 80<<20 {
		t.Errorf("10^8 declared elements over 16 bytes allocated %d bytes", got)
	}
}

// TestLoadNPYDir loads a Keras-style directory: images with channels last
// are laid out CHW, bytes scaled to [0,1], labels from int64 vectors, the
// classes from both splits.
func TestLoadNPYDir(t *testing.T) {
	dir := t.TempDir()
	// Two 1x2 RGB images: pixel p, channel c holds 10*p + c (+100 for the second).
	var x []byte
	for i := 0; i < 2; i++ {
		for p := 0; p < 2; p++ {
			for c := 0; c < 3; c++ {
				x = append(x, byte(100*i+10*p+c))
			}
		}
	}
	labels := func(v ...int64) []byte {
		var b []byte
		for _, l := range v {
			b = binary.LittleEndian.AppendUint64(b, uint64(l))
		}
		return b
	}
	os.WriteFile(filepath.Join(dir, "x_train.npy"), npyBytes("|u1", "(2, 1, 2, 3)", x), 0o644)
	os.WriteFile(filepath.Join(dir, "y_train.npy"), npyBytes("<i8", "(2,)", labels(0, 1)), 0o644)
	os.WriteFile(filepath.Join(dir, "x_test.npy"), npyBytes("|u1", "(1, 1, 2, 3)", x[:6]), 0o644)
	os.WriteFile(filepath.Join(dir, "y_test.npy"), npyBytes("<i8", "(1,)", labels(4)), 0o644)
	tr, te, err := LoadNPYDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Shape != (Shape{C: 3, H: 1, W: 2}) || tr.Classes != 5 || te.Classes != 5 || tr.Len() != 2 || te.Len() != 1 {
		t.Fatalf("shape %v, classes %d/%d, %d/%d examples", tr.Shape, tr.Classes, te.Classes, tr.Len(), te.Len())
	}
	// CHW: channel c of example 1 is pixels 0 and 1 of that channel.
	ex := tr.Example(1)
	for c := 0; c < 3; c++ {
		for p := 0; p < 2; p++ {
			if want := float32(100+10*p+c) / 255; ex[c*2+p] != want {
				t.Fatalf("example 1 channel %d pixel %d = %v, want %v", c, p, ex[c*2+p], want)
			}
		}
	}
	os.WriteFile(filepath.Join(dir, "y_test.npy"), npyBytes("<f4", "(1,)", make([]byte, 4)), 0o644)
	if _, _, err := LoadNPYDir(dir); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "want a vector of integers") {
		t.Errorf("float labels: %v", err)
	}
	os.Remove(filepath.Join(dir, "x_test.npy"))
	if _, _, err := LoadNPYDir(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzNPY(f *testing.F) {
	f.Add(npyBytes("|u1", "(2, 2)", []byte{0, 1, 2, 3}))
	f.Add(npyBytes(">i2", "(1,)", []byte{1, 2}))
	f.Add(npyBytes("<f8", "(1, 1)", make([]byte, 8)))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeNPY(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		n := 1
		for _, d := range a.Shape {
			n *= d
		}
		if n != len(a.Values) {
			t.Fatalf("shape %v but %d values", a.Shape, len(a.Values))
		}
	})
}
