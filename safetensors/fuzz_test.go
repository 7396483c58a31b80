package safetensors

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzRead: Open and Float32s never panic or allocate beyond the file, a
// refusal is one line wrapping ErrFormat, and what they accept holds the
// elements its shapes say and writes back (as F32) to a file that reads
// the same.
func FuzzRead(f *testing.F) {
	f.Add(fixture)
	f.Add(file(`{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"I64","shape":[],"data_offsets":[4,12]}}`, 12))
	f.Add(file(`{"__metadata__":{"a":"b"},"z":{"dtype":"F64","shape":[1,0],"data_offsets":[0,0]}}`, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Open(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			if !errors.Is(err, ErrFormat) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q", err)
			}
			return
		}
		var out []Tensor
		for _, ti := range st.Tensors {
			v, err := st.Float32s(ti)
			if err != nil {
				t.Fatal(err)
			}
			if len(v) != ti.Len() || int64(len(v))*ti.DType.Size() > int64(len(b)) {
				t.Fatalf("%s: %d values for shape %v", ti.Name, len(v), ti.Shape)
			}
			out = append(out, Tensor{Name: ti.Name, Shape: ti.Shape, Data: v})
		}
		var w bytes.Buffer
		if err := Write(&w, out, st.Metadata); err != nil {
			if strings.Contains(err.Error(), "UTF-8") {
				return // JSON decoding replaced bad UTF-8; a name Write refuses
			}
			t.Fatal(err)
		}
		again := open(t, w.Bytes())
		if len(again.Tensors) != len(out) {
			t.Fatalf("%d tensors written, %d read", len(out), len(again.Tensors))
		}
	})
}
