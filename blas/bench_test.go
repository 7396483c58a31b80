package blas

import (
	"fmt"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

type benchShape struct {
	name    string
	tA, tB  bool
	m, n, k int
}

// benchShapes are square products and the GEMMs of the CIFAR-10 CNN
// (3x3 convolutions as im2col products, 32-32-64-64-128-128 channels) at
// batch B: forward (B*HW)×(9*Cin) times (9*Cin)×Cout, the input gradient
// dY·Wᵀ and the weight gradient Xᵀ·dY.
func benchShapes() []benchShape {
	s := []benchShape{
		{name: "sq64", m: 64, n: 64, k: 64},
		{name: "sq256", m: 256, n: 256, k: 256},
		{name: "sq1024", m: 1024, n: 1024, k: 1024},
		{name: "sq2048", m: 2048, n: 2048, k: 2048},
	}
	layers := []struct{ hw, kin, cout int }{
		{32 * 32, 27, 32}, {32 * 32, 288, 32}, {16 * 16, 288, 64},
		{16 * 16, 576, 64}, {8 * 8, 576, 128}, {8 * 8, 1152, 128},
	}
	for _, batch := range []int{64, 256} {
		for _, l := range layers {
			mm := batch * l.hw
			id := fmt.Sprintf("B%d-%dx%dx%d", batch, mm, l.kin, l.cout)
			s = append(s,
				benchShape{name: "fwd-" + id, m: mm, n: l.cout, k: l.kin},
				benchShape{name: "dX-" + id, tB: true, m: mm, n: l.kin, k: l.cout},
				benchShape{name: "dW-" + id, tA: true, m: l.kin, n: l.cout, k: mm},
			)
		}
	}
	return s
}

func benchOperands[T float32 | float64](s benchShape) (a []T, lda int, b []T, ldb int, c []T) {
	rng := rand.New(rand.NewPCG(1, 1))
	a = make([]T, s.m*s.k)
	b = make([]T, s.k*s.n)
	c = make([]T, s.m*s.n)
	for i := range a {
		a[i] = T(rng.Float64())
	}
	for i := range b {
		b[i] = T(rng.Float64())
	}
	lda, ldb = s.k, s.n
	if s.tA {
		lda = s.m
	}
	if s.tB {
		ldb = s.k
	}
	return
}

func reportGFLOPs(b *testing.B, s benchShape) {
	b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkSgemm compares the package's Sgemm (all cores, and one
// goroutine per kernel) with gonum's native Sgemm.
func BenchmarkSgemm(b *testing.B) {
	for _, s := range benchShapes() {
		a, lda, bb, ldb, c := benchOperands[float32](s)
		run := func(name string, f func()) {
			b.Run(s.name+"/"+name, func(b *testing.B) {
				f() // fault in C's pages and fill the buffer pools before timing
				for b.Loop() {
					f()
				}
				reportGFLOPs(b, s)
			})
		}
		run("dpmf", func() { Sgemm(trans(s.tA), trans(s.tB), s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n) })
		run("gonum", func() {
			gonum.Implementation{}.Sgemm(trans(s.tA), trans(s.tB), s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
		})
		if s.m*s.n*s.k > 1<<27 && s.name[:2] != "sq" {
			continue
		}
		for _, kern := range kernels32() {
			if kern.name == "generic" && s.m*s.n*s.k > 1<<28 {
				continue
			}
			run(kern.name+"-1thread", func() { gemm(kern, 1, s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n) })
		}
	}
}

// BenchmarkDgemm compares the package's Dgemm (all cores, and one
// goroutine per kernel) with gonum's native Dgemm.
func BenchmarkDgemm(b *testing.B) {
	for _, s := range benchShapes() {
		a, lda, bb, ldb, c := benchOperands[float64](s)
		run := func(name string, f func()) {
			b.Run(s.name+"/"+name, func(b *testing.B) {
				f() // fault in C's pages and fill the buffer pools before timing
				for b.Loop() {
					f()
				}
				reportGFLOPs(b, s)
			})
		}
		run("dpmf", func() { Dgemm(trans(s.tA), trans(s.tB), s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n) })
		run("gonum", func() {
			gonum.Implementation{}.Dgemm(trans(s.tA), trans(s.tB), s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n)
		})
		if s.m*s.n*s.k > 1<<27 && s.name[:2] != "sq" {
			continue
		}
		for _, kern := range kernels64() {
			if kern.name == "generic" && s.m*s.n*s.k > 1<<28 {
				continue
			}
			run(kern.name+"-1thread", func() { gemm(kern, 1, s.tA, s.tB, s.m, s.n, s.k, 1, a, lda, bb, ldb, 0, c, s.n) })
		}
	}
}

// BenchmarkClock estimates the core clock from a chain of dependent
// 64-bit multiplies (3 cycles each on Zen and recent Intel cores), to turn
// GFLOP/s into a fraction of the FMA peak: 2 FMA pipes × lanes × 2 flops
// per cycle.
func BenchmarkClock(b *testing.B) {
	const chain = 1 << 24
	x := uint64(3)
	for b.Loop() {
		for range chain {
			x *= 0x9E3779B97F4A7C15
		}
	}
	sink = x
	ghz := 3 * chain * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(ghz, "GHz")
	b.ReportMetric(2*8*2*ghz, "AVX2-fp32-peak-GFLOP/s")
	b.ReportMetric(2*16*2*ghz, "AVX512-fp32-peak-GFLOP/s")
}

var sink uint64

// BenchmarkDsyrk compares the blocked Dsyrk (mat.SymDense.SymOuterK, the
// Gram matrices of the factorization optimizers) with gonum's.
func BenchmarkDsyrk(b *testing.B) {
	for _, n := range []int{256, 1000} {
		s := benchShape{name: fmt.Sprintf("n%d", n), m: n, n: n, k: n}
		a, _, _, _, c := benchOperands[float64](s)
		for _, impl := range []struct {
			name string
			f    func(ul gblas.Uplo, tA gblas.Transpose, n, k int, alpha float64, a []float64, lda int, beta float64, c []float64, ldc int)
		}{{"dpmf", Implementation{}.Dsyrk}, {"gonum", gonum.Implementation{}.Dsyrk}} {
			b.Run(s.name+"/"+impl.name, func(b *testing.B) {
				impl.f(gblas.Upper, gblas.Trans, n, n, 1, a, n, 0, c, n)
				for b.Loop() {
					impl.f(gblas.Upper, gblas.Trans, n, n, 1, a, n, 0, c, n)
				}
				// n(n+1)k flops for one triangle.
				b.ReportMetric(float64(n)*float64(n+1)*float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkPackedColdB times products over a packed B larger than L2
// taken in turn from 32 copies (75 MB for 2304 x 256, so each comes from
// memory, as a large layer's weight does once a training step), with and
// without the kernels' prefetch of the next micro-panel
// (PackedB32.SetPrefetch); hot is one copy. Shapes: WRN-16-4's 8x8
// forward product and kernel-row input gradient for two examples.
func BenchmarkPackedColdB(b *testing.B) {
	for _, s := range []benchShape{{name: "fwd-128x256x2304", m: 128, n: 256, k: 2304}, {name: "dX-128x768x256", m: 128, n: 768, k: 256}} {
		a, lda, raw, ldb, c := benchOperands[float32](s)
		const copies = 32
		packed := make([]PackedB32, copies)
		for q := range packed {
			PackB32(gblas.NoTrans, s.k, s.n, 1, raw, ldb, &packed[q])
		}
		var g Serial32
		for _, on := range []bool{true, false} {
			for _, n := range []int{1, copies} {
				name := fmt.Sprintf("%s/prefetch=%v/copies=%d", s.name, on, n)
				b.Run(name, func(b *testing.B) {
					for q := range packed {
						packed[q].SetPrefetch(on)
					}
					q := 0
					for b.Loop() {
						g.SgemmPacked(gblas.NoTrans, s.m, a, lda, &packed[q%n], 0, c, s.n)
						q++
					}
					b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
