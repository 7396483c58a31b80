//go:build amd64 && !purego

package blas

import "unsafe"

//go:noescape
func copyRowsAVX(dst, src unsafe.Pointer, stride, rows, rowBytes int)

// packRowsFast copies rows of nr elements of b, starting at b[off] and ldb
// apart, into dst one after the other (a full micro-panel of a row-major
// B: packB's inner loop without a call per row), with AVX when a row is
// 64 or 128 bytes (the AVX2 and AVX-512 kernels' panel widths), and
// reports whether it did.
func packRowsFast[T float32 | float64](dst, b []T, off, ldb, rows, nr int) bool {
	size := int(unsafe.Sizeof(T(0)))
	if rowBytes := nr * size; rows < 1 || rowBytes != 64 && rowBytes != 128 || !hasAVX2() {
		return false
	}
	_, _ = b[off+(rows-1)*ldb+nr-1], dst[rows*nr-1]
	copyRowsAVX(unsafe.Pointer(&dst[0]), unsafe.Pointer(&b[off]), ldb*size, rows, nr*size)
	return true
}
