//go:build !amd64 || purego

package blas

func kernel32() kernel[float32] { return genericKernel32() }
func kernel64() kernel[float64] { return genericKernel64() }

// kernels32 lists every float32 kernel usable on this machine, for tests.
func kernels32() []kernel[float32] { return []kernel[float32]{genericKernel32()} }

// kernels64 lists every float64 kernel usable on this machine, for tests.
func kernels64() []kernel[float64] { return []kernel[float64]{genericKernel64()} }
