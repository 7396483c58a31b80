package atomicfile

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Float is the element type of a float buffer.
type Float interface{ ~float32 | ~float64 }

// FloatSize is the bytes of one T in a float buffer: 4 or 8.
func FloatSize[T Float]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// AppendFloats appends x to b as little-endian IEEE 754 values (4 bytes
// each for float32, 8 for float64): the one float codec of every state
// and file format, bit for bit (NaN payloads and signed zeros included).
func AppendFloats[T Float](b []byte, x []T) []byte {
	if FloatSize[T]() == 4 {
		for _, v := range x {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
		}
		return b
	}
	for _, v := range x {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return b
}

// FloatBytes returns the bytes AppendFloats(nil, x) would append: on a
// little-endian machine x's own memory, without a copy (read it only, and
// only while x is alive and unchanged), else a new slice. For hashing
// large buffers at the speed of the hash.
func FloatBytes[T Float](x []T) []byte {
	if len(x) == 0 {
		return nil
	}
	if !littleEndian() {
		return AppendFloats(nil, x)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), len(x)*FloatSize[T]())
}

// littleEndian says whether this machine stores the low byte first, as
// the codec does.
func littleEndian() bool {
	v := uint16(1)
	return *(*byte)(unsafe.Pointer(&v)) == 1
}

// ReadFloats fills dst from the front of b (AppendFloats's encoding) and
// returns the rest of b. An error wrapping ErrCorrupt says how short b is.
func ReadFloats[T Float](dst []T, b []byte) ([]byte, error) {
	size := FloatSize[T]()
	if len(b)/size < len(dst) {
		return nil, corruptf("%d float values need %d bytes, %d remain", len(dst), size*len(dst), len(b))
	}
	if size == 4 {
		for i := range dst {
			dst[i] = T(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
	} else {
		for i := range dst {
			dst[i] = T(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	}
	return b[size*len(dst):], nil
}

// DecodeFloats decodes all of b (AppendFloats's encoding) into a new
// slice of n values; b must hold exactly n values.
func DecodeFloats[T Float](b []byte, n int) ([]T, error) {
	// By division: size*n overflows for a corrupt n.
	if size := FloatSize[T](); n < 0 || len(b)%size != 0 || len(b)/size != n {
		return nil, corruptf("%d bytes for %d float values of %d bytes", len(b), n, FloatSize[T]())
	}
	x := make([]T, n)
	_, err := ReadFloats(x, b)
	return x, err
}
