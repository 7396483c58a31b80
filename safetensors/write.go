package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Tensor is a tensor to write: its values as float32, row-major, stored
// as DType (F32, F16 or BF16; zero means F32).
type Tensor struct {
	Name  string
	Shape []int
	DType DType
	Data  []float32
}

// Write writes tensors, in this order in the buffer, and metadata (may be
// nil) as a safetensors file. The header lists the metadata first, then
// the tensors in order, and is padded with spaces to a multiple of 8
// bytes so that the buffer is aligned. F16 and BF16 round to nearest
// (ties to even); a finite value beyond F16's range is refused rather
// than written as an infinity.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	var h strings.Builder
	h.WriteByte('{')
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		h.WriteString(quote(MetadataKey) + ":{")
		for i, k := range keys {
			if i > 0 {
				h.WriteByte(',')
			}
			h.WriteString(quote(k) + ":" + quote(metadata[k]))
		}
		h.WriteByte('}')
	}
	seen := map[string]bool{}
	var off int64
	for i, t := range tensors {
		dt := t.DType
		if dt == 0 {
			dt = F32
		}
		if !dt.writable() {
			return fmt.Errorf("safetensors: write: tensor %q: cannot write dtype %v (F32, F16 or BF16)", t.Name, dt)
		}
		if !utf8.ValidString(t.Name) {
			return fmt.Errorf("safetensors: write: tensor name %q is not UTF-8", t.Name)
		}
		if t.Name == MetadataKey || seen[t.Name] {
			return fmt.Errorf("safetensors: write: tensor name %q used twice or reserved", t.Name)
		}
		seen[t.Name] = true
		n := 1
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("safetensors: write: tensor %q: shape %v", t.Name, t.Shape)
			}
			n *= d
		}
		if n != len(t.Data) {
			return fmt.Errorf("safetensors: write: tensor %q: shape %v holds %d values, not %d", t.Name, t.Shape, n, len(t.Data))
		}
		if dt == F16 {
			for j, v := range t.Data {
				if math.Abs(float64(v)) >= maxF16+16 { // 65520 and beyond round to infinity
					return fmt.Errorf("safetensors: write: tensor %q: value %g at %d is beyond F16's range (%d)", t.Name, v, j, maxF16)
				}
			}
		}
		if len(metadata) > 0 || i > 0 {
			h.WriteByte(',')
		}
		dims := make([]string, len(t.Shape))
		for j, d := range t.Shape {
			dims[j] = strconv.Itoa(d)
		}
		end := off + int64(n)*dt.Size()
		fmt.Fprintf(&h, `%s:{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}`, quote(t.Name), dt, strings.Join(dims, ","), off, end)
		off = end
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	bw := bufio.NewWriter(w)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(h.Len()))
	bw.Write(b[:])
	bw.WriteString(h.String())
	for _, t := range tensors {
		for _, v := range t.Data {
			switch t.DType {
			case F16:
				binary.LittleEndian.PutUint16(b[:], f32ToF16(v))
				bw.Write(b[:2])
			case BF16:
				binary.LittleEndian.PutUint16(b[:], f32ToBF16(v))
				bw.Write(b[:2])
			default:
				binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
				bw.Write(b[:4])
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: write: %w", err)
	}
	return nil
}

// quote is s as a JSON string.
func quote(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
