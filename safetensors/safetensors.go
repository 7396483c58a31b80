// Package safetensors reads and writes the safetensors format, the tensor
// file that PyTorch, Hugging Face and gomlx share, so that dpmf models can
// be exported to and imported from other frameworks.
//
// A file is an 8-byte little-endian header length N, a JSON header of N
// bytes mapping each tensor's name to {"dtype", "shape", "data_offsets"}
// (begin and end byte offsets into the buffer) plus an optional
// "__metadata__" object of strings, then the byte buffer holding the
// tensors, little-endian and row-major
// (https://huggingface.co/docs/safetensors). Open checks the header
// completely before any tensor is read: the header length against the
// file and a cap, the JSON, every dtype, shape and offset pair, and that
// the tensors cover the buffer exactly, with no overlap and no hole. No
// allocation is sized from the file before it has been checked against
// the file's size.
package safetensors

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
)

// ErrFormat is wrapped by every error for a file that is not valid
// safetensors.
var ErrFormat = errors.New("not a valid safetensors file")

// FormatError says why a file is not valid safetensors, and which tensor
// (if one) is at fault. Its message is one line.
type FormatError struct {
	// Tensor is the offending tensor's name, empty for the file as a whole.
	Tensor string
	// Reason says what is wrong.
	Reason string
}

func (e *FormatError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("safetensors: tensor %q: %s", e.Tensor, e.Reason)
	}
	return "safetensors: " + e.Reason
}

// Is reports whether target is ErrFormat or dpcore.ErrInvalid (the
// module's mark of bad input).
func (e *FormatError) Is(target error) bool {
	return target == ErrFormat || target == dpcore.ErrInvalid
}

func formatErr(tensor, format string, args ...any) error {
	return &FormatError{Tensor: tensor, Reason: fmt.Sprintf(format, args...)}
}

// DType is the element type of a tensor as the header names it.
type DType uint8

// The element types this package reads. F32, F16 and BF16 are also
// written; F64 and I64 are read (converted to float32) only.
const (
	F32 DType = iota + 1
	F16
	BF16
	F64
	I64
)

var dtypeNames = [...]string{F32: "F32", F16: "F16", BF16: "BF16", F64: "F64", I64: "I64"}
var dtypeSizes = [...]int64{F32: 4, F16: 2, BF16: 2, F64: 8, I64: 8}

func (d DType) String() string {
	if d == 0 || int(d) >= len(dtypeNames) {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// Size is the size of one element in bytes (0 for an unknown type).
func (d DType) Size() int64 {
	if d == 0 || int(d) >= len(dtypeSizes) {
		return 0
	}
	return dtypeSizes[d]
}

// ParseDType reads a dtype name ("F32", "F16", "BF16", "F64", "I64").
func ParseDType(s string) (DType, error) {
	for d := F32; int(d) < len(dtypeNames); d++ {
		if dtypeNames[d] == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("safetensors: dtype %q: want F32, F16, BF16, F64 or I64", s)
}

// writable reports whether Write can store elements of type d.
func (d DType) writable() bool { return d == F32 || d == F16 || d == BF16 }

// maxF16 is the largest finite half-precision value.
const maxF16 = 65504

// f16ToF32 converts an IEEE 754 half-precision value exactly.
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: man * 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// f32ToF16 rounds f to the nearest half-precision value, ties to even.
// Values beyond the half range become infinities (Write refuses them
// before calling it).
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 // quiet NaN
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half (or zero): the value is m * 2^-24 with m the
		// 24-bit significand shifted right by 14-e... computed in float64,
		// where it is exact, then rounded to even.
		if e < -10 {
			return sign
		}
		v := math.Abs(float64(f)) * (1 << 24)
		r := math.RoundToEven(v)
		return sign | uint16(r) // r <= 1024: 1024 is the smallest normal, encoded the same way
	}
	// Normal: keep 10 mantissa bits, round to even on the 13 dropped.
	h := uint32(e)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(h)
}

// bf16ToF32 converts a bfloat16 value exactly.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds f to the nearest bfloat16 value, ties to even.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it a NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
