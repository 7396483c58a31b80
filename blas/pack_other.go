//go:build !amd64 || purego

package blas

// packRowsFast has no vector form here: packB copies row by row.
func packRowsFast[T float32 | float64](dst, b []T, off, ldb, rows, nr int) bool { return false }
