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

//go:noescape
func addAVX2(y, x *float32, n int)

//go:noescape
func axpyAVX2(a float32, x, y *float32, n int)

// add adds x to y (len(y) <= len(x)).
func add(y, x []float32) {
	x = x[:len(y)]
	n := 0
	if hasAVX2FMA {
		if n = len(y) &^ 7; n > 0 {
			addAVX2(&y[0], &x[0], n)
		}
	}
	for k := n; k < len(y); k++ {
		y[k] += x[k]
	}
}

// axpy adds a*x to y (len(y) >= len(x)).
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	n := 0
	if hasAVX2FMA {
		if n = len(x) &^ 7; n > 0 {
			axpyAVX2(a, &x[0], &y[0], n)
		}
	}
	for k := n; k < len(x); k++ {
		y[k] += a * x[k]
	}
}

//go:noescape
func max4AVX2(in *float32, c, wc int, out *float32, arg *int32, base int32)

// maxPool2Fast pools one example with 2x2 windows eight channels at a time
// if it can, reporting whether it did.
func (s *stage) maxPool2Fast(in, out []float32, arg []int32) bool {
	C, W := s.in.C, s.in.W
	if !hasAVX2FMA || s.pool != 2 || C%8 != 0 {
		return false
	}
	OW := s.out.W
	for oh := range s.out.H {
		for ow := range OW {
			o := (oh*OW + ow) * C
			base := (oh*2*W + ow*2) * C
			_ = in[base+W*C+2*C-1]
			max4AVX2(&in[base], C, W*C, &out[o], &arg[o], int32(base))
		}
	}
	return true
}
