package blas

import "unsafe"

// Blocking for the portable kernel: the 4×4 tile keeps its 16 accumulators
// in registers on machines with 16 or more floating-point registers; the
// block sizes are the AVX2 ones scaled to the smaller tile.
const (
	genericMR = 4
	genericNR = 4
)

func genericKernel32() kernel[float32] {
	return kernel[float32]{name: "generic", mr: genericMR, nr: genericNR, kc: 256, mc: 128, nc: 2048, fn: gemmKernelGeneric[float32], strided: gemmKernelGenericStrided[float32], runs: gemmKernelGenericRuns[float32], rowsMR: genericMR, rows: gemmKernelGenericStrided[float32], packMin: 16, parallelMin: parallelWork}
}

func genericKernel64() kernel[float64] {
	return kernel[float64]{name: "generic", mr: genericMR, nr: genericNR, kc: 256, mc: 64, nc: 2048, fn: gemmKernelGeneric[float64], strided: gemmKernelGenericStrided[float64], packMin: 16, parallelMin: parallelWork}
}

// gemmKernelGeneric is the portable 4×4 micro-kernel on packed A.
func gemmKernelGeneric[T float32 | float64](kc int, a, b, c *T, ldc int, overwrite bool) {
	gemmKernelGenericStrided(kc, a, 1, genericMR, b, c, ldc, overwrite)
}

// gemmKernelGenericStrided is the portable 4×4 micro-kernel reading A in
// place.
func gemmKernelGenericStrided[T float32 | float64](kc int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool) {
	run := [2]int{0, kc}
	gemmKernelGenericRuns(&run[0], 1, a, rs, cs, b, c, ldc, overwrite)
}

// gemmKernelGenericRuns is the portable 4×4 micro-kernel reading A in
// place over the k steps of nruns runs (start, length pairs at runs), in
// turn, into one sum.
func gemmKernelGenericRuns[T float32 | float64](runs *int, nruns int, a *T, rs, cs int, b, c *T, ldc int, overwrite bool) {
	rl := unsafe.Slice(runs, 2*nruns)
	kc, end := 0, 0
	for r := 0; r < len(rl); r += 2 {
		kc += rl[r+1]
		end = max(end, rl[r]+rl[r+1])
	}
	var as []T
	if end > 0 {
		as = unsafeSlice(a, (end-1)*cs+(genericMR-1)*rs+1)
	}
	bs := unsafeSlice(b, kc*genericNR)
	var c00, c01, c02, c03 T
	var c10, c11, c12, c13 T
	var c20, c21, c22, c23 T
	var c30, c31, c32, c33 T
	q := 0 // the row of B
	for r := 0; r < len(rl); r += 2 {
		for p := rl[r]; p < rl[r]+rl[r+1]; p++ {
			bv := bs[q*genericNR : q*genericNR+genericNR : q*genericNR+genericNR]
			q++
			o := p * cs
			a0, a1, a2, a3 := as[o], as[o+rs], as[o+2*rs], as[o+3*rs]
			b0, b1, b2, b3 := bv[0], bv[1], bv[2], bv[3]
			c00 += a0 * b0
			c01 += a0 * b1
			c02 += a0 * b2
			c03 += a0 * b3
			c10 += a1 * b0
			c11 += a1 * b1
			c12 += a1 * b2
			c13 += a1 * b3
			c20 += a2 * b0
			c21 += a2 * b1
			c22 += a2 * b2
			c23 += a2 * b3
			c30 += a3 * b0
			c31 += a3 * b1
			c32 += a3 * b2
			c33 += a3 * b3
		}
	}
	cm := unsafeSlice(c, 3*ldc+genericNR)
	if overwrite {
		for i := range genericMR {
			clear(cm[i*ldc : i*ldc+genericNR])
		}
	}
	r := cm[0:4:4]
	r[0] += c00
	r[1] += c01
	r[2] += c02
	r[3] += c03
	r = cm[ldc : ldc+4 : ldc+4]
	r[0] += c10
	r[1] += c11
	r[2] += c12
	r[3] += c13
	r = cm[2*ldc : 2*ldc+4 : 2*ldc+4]
	r[0] += c20
	r[1] += c21
	r[2] += c22
	r[3] += c23
	r = cm[3*ldc : 3*ldc+4 : 3*ldc+4]
	r[0] += c30
	r[1] += c31
	r[2] += c32
	r[3] += c33
}
