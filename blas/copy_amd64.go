//go:build amd64 && !purego

package blas

//go:noescape
func copyRowsAVX2(dst, src *float32, ldb, rows, nr int)

// packRows32 copies rows > 0 rows of nr floats, ldb apart in src, into
// dst (rows*nr floats) one after the other with AVX2 moves, for nr 16 or
// 32 (the vector kernels' NR), and reports whether it did.
func packRows32(dst, src []float32, ldb, rows, nr int) bool {
	if !hasAVX2() || nr != 16 && nr != 32 {
		return false
	}
	copyRowsAVX2(&dst[0], &src[0], ldb, rows, nr)
	return true
}
