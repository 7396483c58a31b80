//go:build !amd64 || purego

package nn

func denseFwd4x64(k int, a *float32, lda int, w *float32, ldw int, c *float32, ldc int, overwrite bool) {
	panic("nn: no dense kernels")
}

func denseBwd4x16(n int, gr *float32, ldg int, w *float32, ldw int, c *float32, ldc int, overwrite bool) {
	panic("nn: no dense kernels")
}

func hasDenseKernels() bool { return false }
