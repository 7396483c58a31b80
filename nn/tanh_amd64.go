//go:build amd64 && !purego

package nn

import "golang.org/x/sys/cpu"

// hasAVX2FMA is fixed at start-up by the CPU.
var hasAVX2FMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func biasTanhAVX2(z, bias *float32, n int)

// biasTanh sets z[j] = tanh(z[j] + bias[j]), eight at a time with AVX2
// (the same approximant as tanh32, in float32 arithmetic: relative error
// below 1e-6) and the rest with tanh32.
func biasTanh(z, bias []float32) {
	z = z[:len(bias)]
	n := 0
	if hasAVX2FMA {
		n = len(bias) &^ 7
		if n > 0 {
			biasTanhAVX2(&z[0], &bias[0], n)
		}
	}
	for j := n; j < len(bias); j++ {
		z[j] = tanh32(z[j] + bias[j])
	}
}
