package blas

import "unsafe"

// unsafeSlice turns a kernel's base pointer back into a slice; the driver
// guarantees that n elements from p lie inside one Go slice.
func unsafeSlice[T float32 | float64](p *T, n int) []T {
	return unsafe.Slice(p, n)
}
