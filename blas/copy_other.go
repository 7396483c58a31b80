//go:build !amd64 || purego

package blas

// packRows32 reports false: packB copies the rows one by one.
func packRows32(dst, src []float32, ldb, rows, nr int) bool { return false }
