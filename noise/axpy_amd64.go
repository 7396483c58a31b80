//go:build amd64 && !purego

package noise

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2 kernel for float32 back substitution. It is set
// once from CPUID and never written afterwards.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasAVX

// axpy4AVX2 is y += ((a x + b u) + c v) + e w on float32 with 8-wide AVX2,
// multiplying and adding separately in the same order as the pure-Go loop,
// so both give bit-identical results. All slices have at least len(y)
// elements.
//
//go:noescape
func axpy4AVX2(a, b, c, e float32, x, u, v, w, y []float32)
