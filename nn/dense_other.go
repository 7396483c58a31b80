//go:build !amd64 || purego

package nn

func denseFwd4x64(k int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, overwrite bool) {
	panic("nn: no dense kernels")
}

func denseBwd4x16(n int, gr *float32, ldg int, w *float32, ldw int, c *float32, ldc int, overwrite bool) {
	panic("nn: no dense kernels")
}

func hasDenseKernels() bool { return false }

// transposeTo writes the rows x cols matrix src (rows lds apart) into
// dst as cols x rows (rows ldd apart).
func transposeTo(dst []float32, ldd int, src []float32, lds, rows, cols int) {
	transposeLoop(dst, ldd, src, lds, rows, cols)
}
