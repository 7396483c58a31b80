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
