//go:build amd64 && !purego

package nn

//go:noescape
func denseFwd4x64(k int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, overwrite bool)

//go:noescape
func denseBwd4x16(n int, gr *float32, ldg int, w *float32, ldw int, c *float32, ldc int, overwrite bool)

// hasDenseKernels reports whether denseFwd4x64 and denseBwd4x16 run on
// this CPU: the AVX-512 kernels of package blas's products, whose
// summation order they keep.
func hasDenseKernels() bool { return hasAVX512 }

//go:noescape
func transpose16(dst *float32, ldd int, src *float32, lds int)

// transposeTo writes the rows x cols matrix src (rows lds apart) into
// dst as cols x rows (rows ldd apart), in 16x16 blocks with AVX-512
// where both are multiples of 16.
func transposeTo(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	if !hasAVX512 || rows%16 != 0 || cols%16 != 0 {
		transposeLoop(dst, ldd, src, lds, rows, cols)
		return
	}
	if rows == 0 || cols == 0 {
		return
	}
	_, _ = dst[(cols-1)*ldd+rows-1], src[(rows-1)*lds+cols-1]
	for r := 0; r < rows; r += 16 {
		for c := 0; c < cols; c += 16 {
			transpose16(&dst[c*ldd+r], ldd, &src[r*lds+c], lds)
		}
	}
}
