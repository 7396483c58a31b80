package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
)

// MaxHeader caps the header length Open accepts (100 MB, the cap of the
// reference implementation), whatever the file's size.
const MaxHeader = 100_000_000

// MetadataKey is the header key of the free-form string metadata.
const MetadataKey = "__metadata__"

// Info describes one tensor of a file.
type Info struct {
	Name  string
	DType DType
	Shape []int
	// Begin and End are the tensor's byte offsets into the buffer.
	Begin, End int64
}

// Len is the number of elements, the product of the shape (1 for a
// scalar).
func (t Info) Len() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is an open safetensors file whose header has been checked.
type File struct {
	r      io.ReaderAt
	buffer int64 // offset of the byte buffer in r
	// Tensors are the file's tensors in buffer order.
	Tensors []Info
	// Metadata is the header's __metadata__ (nil when absent).
	Metadata map[string]string
}

// Open reads and checks the header of the safetensors file r of size
// bytes. Tensors are read afterwards by Float32s. Every error wraps
// ErrFormat (or r's error) and is one line.
func Open(r io.ReaderAt, size int64) (*File, error) {
	if size < 8 {
		return nil, formatErr("", "file of %d bytes is shorter than the 8-byte header length", size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > uint64(size-8) {
		return nil, formatErr("", "header length %d is beyond the end of the file (%d bytes)", n, size)
	}
	if n < 2 {
		return nil, formatErr("", "header length %d is too short for a JSON object", n)
	}
	if n > MaxHeader {
		return nil, formatErr("", "header length %d is over the cap of %d bytes", n, MaxHeader)
	}
	hdr := make([]byte, n) // n <= size-8 and n <= MaxHeader
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("safetensors: reading the header: %w", err)
	}
	f := &File{r: r, buffer: 8 + int64(n)}
	if err := f.parseHeader(hdr, size-f.buffer); err != nil {
		return nil, err
	}
	return f, nil
}

// entry is a tensor's header record; pointers tell a missing field.
type entry struct {
	DType       *string   `json:"dtype"`
	Shape       *[]uint64 `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// parseHeader decodes hdr, checks each tensor and that the tensors cover
// the buffer of buf bytes exactly.
func (f *File) parseHeader(hdr []byte, buf int64) error {
	if len(hdr) == 0 || hdr[0] != '{' {
		return formatErr("", "header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return formatErr("", "header is not JSON: %s", jsonReason(err))
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return formatErr("", "header is not JSON: %s", jsonReason(err))
		}
		name, ok := tok.(string)
		if !ok {
			return formatErr("", "header is not a JSON object")
		}
		if seen[name] {
			return formatErr(name, "named twice in the header")
		}
		seen[name] = true
		if name == MetadataKey {
			if err := dec.Decode(&f.Metadata); err != nil {
				return formatErr("", "%s is not an object of strings: %s", MetadataKey, jsonReason(err))
			}
			continue
		}
		var e entry
		if err := dec.Decode(&e); err != nil {
			return formatErr(name, "not an object of dtype, shape and data_offsets: %s", jsonReason(err))
		}
		t, err := e.info(name, buf)
		if err != nil {
			return err
		}
		f.Tensors = append(f.Tensors, t)
	}
	if _, err := dec.Token(); err != nil {
		return formatErr("", "header is not JSON: %s", jsonReason(err))
	}
	// The header may be padded with spaces, nothing else.
	rest := hdr[dec.InputOffset():]
	if len(bytes.TrimRight(rest, " ")) != 0 {
		return formatErr("", "header has %d bytes after its JSON object", len(rest))
	}
	// Sorted by offset, the tensors must tile [0, buf).
	slices.SortStableFunc(f.Tensors, func(a, b Info) int {
		if a.Begin != b.Begin {
			return cmpInt64(a.Begin, b.Begin)
		}
		return cmpInt64(a.End, b.End)
	})
	var at int64
	for _, t := range f.Tensors {
		if t.Begin < at {
			return formatErr(t.Name, "data_offsets [%d, %d] overlap the tensor before, which ends at %d", t.Begin, t.End, at)
		}
		if t.Begin > at {
			return formatErr(t.Name, "data_offsets [%d, %d] leave a hole in the buffer at [%d, %d]", t.Begin, t.End, at, t.Begin)
		}
		at = t.End
	}
	if at != buf {
		return formatErr("", "the tensors cover %d bytes of a %d-byte buffer", at, buf)
	}
	return nil
}

// info checks one header record against a buffer of buf bytes.
func (e entry) info(name string, buf int64) (Info, error) {
	if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
		return Info{}, formatErr(name, "wants dtype, shape and data_offsets")
	}
	dt, err := ParseDType(*e.DType)
	if err != nil {
		return Info{}, formatErr(name, "unknown dtype %q (this build reads F32, F16, BF16, F64 and I64)", *e.DType)
	}
	off := *e.DataOffsets
	if len(off) != 2 {
		return Info{}, formatErr(name, "data_offsets has %d entries, want 2", len(off))
	}
	if off[0] > off[1] || off[1] > uint64(buf) {
		return Info{}, formatErr(name, "data_offsets [%d, %d] are out of the buffer's bounds [0, %d]", off[0], off[1], buf)
	}
	// The element count can be no more than the buffer's bytes; checking
	// each partial product against that bound keeps it from overflowing.
	shape := make([]int, len(*e.Shape))
	n := uint64(1)
	for i, d := range *e.Shape {
		if d > uint64(buf) || (d != 0 && n > uint64(buf)/d) {
			return Info{}, formatErr(name, "shape %v has more elements than the %d-byte buffer holds", *e.Shape, buf)
		}
		n *= d
		shape[i] = int(d)
	}
	if want := n * uint64(dt.Size()); off[1]-off[0] != want {
		return Info{}, formatErr(name, "data_offsets [%d, %d] hold %d bytes, but %s %v takes %d", off[0], off[1], off[1]-off[0], dt, shape, want)
	}
	return Info{Name: name, DType: dt, Shape: shape, Begin: int64(off[0]), End: int64(off[1])}, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// jsonReason is a JSON error without its package prefix.
func jsonReason(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end"
	}
	return err.Error()
}

// Lookup returns the tensor called name.
func (f *File) Lookup(name string) (Info, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Info{}, false
}

// Float32s reads tensor t of f converted to float32: F16 and BF16 exactly,
// F64 and I64 rounded to nearest. It reads in blocks, allocating only the
// result (whose size Open checked against the file's).
func (f *File) Float32s(t Info) ([]float32, error) {
	size := t.DType.Size()
	if size == 0 || t.End-t.Begin != int64(t.Len())*size {
		return nil, formatErr(t.Name, "is not a tensor of this file")
	}
	out := make([]float32, t.Len())
	var block [1 << 16]byte
	for i := 0; i < len(out); {
		k := min(len(out)-i, len(block)/int(size))
		b := block[:k*int(size)]
		if _, err := f.r.ReadAt(b, f.buffer+t.Begin+int64(i)*size); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, formatErr(t.Name, "file ends inside the tensor's data")
			}
			return nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
		}
		dst := out[i : i+k]
		switch t.DType {
		case F32:
			for j := range dst {
				dst[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			}
		case F16:
			for j := range dst {
				dst[j] = f16ToF32(binary.LittleEndian.Uint16(b[2*j:]))
			}
		case BF16:
			for j := range dst {
				dst[j] = bf16ToF32(binary.LittleEndian.Uint16(b[2*j:]))
			}
		case F64:
			for j := range dst {
				dst[j] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*j:])))
			}
		case I64:
			for j := range dst {
				dst[j] = float32(int64(binary.LittleEndian.Uint64(b[8*j:])))
			}
		}
		i += k
	}
	return out, nil
}
