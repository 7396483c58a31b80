package blas

import (
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

func TestSerial32(t *testing.T) {
	var s Serial32
	testSerial(t, s.Sgemm, gonum.Implementation{}.Sgemm, 1e-3)
}

func TestSerial64(t *testing.T) {
	var s Serial64
	testSerial(t, s.Dgemm, gonum.Implementation{}.Dgemm, 1e-10)
}

// testSerial checks a serial GEMM against gonum's on shapes from vectors
// to edge tiles and each transpose, and that it does not allocate.
func testSerial[T float32 | float64](t *testing.T, gemm, ref gemmFunc[T], tol float64) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range [][3]int{{1, 300, 200}, {200, 1, 300}, {3, 4, 5}, {64, 128, 1152}, {1024, 32, 27}, {288, 32, 1024}, {7, 129, 33}} {
		m, n, k := d[0], d[1], d[2]
		for _, tr := range [][2]gblas.Transpose{{gblas.NoTrans, gblas.NoTrans}, {gblas.Trans, gblas.NoTrans}, {gblas.NoTrans, gblas.Trans}} {
			a, b, c := make([]T, m*k), make([]T, k*n), make([]T, m*n)
			for _, x := range [][]T{a, b, c} {
				for i := range x {
					x[i] = T(rng.NormFloat64())
				}
			}
			lda, ldb := k, n
			if tr[0] == gblas.Trans {
				lda = m
			}
			if tr[1] == gblas.Trans {
				ldb = k
			}
			want := append([]T(nil), c...)
			ref(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, want, n)
			gemm(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, c, n)
			for i := range c {
				if diff := float64(c[i] - want[i]); diff > tol || diff < -tol {
					t.Fatalf("%v %v: c[%d] = %v, want %v", d, tr, i, c[i], want[i])
				}
			}
			if al := testing.AllocsPerRun(3, func() {
				gemm(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, c, n)
			}); al != 0 {
				t.Errorf("%v %v: %v allocations per call", d, tr, al)
			}
		}
	}
}

// A prepacked right operand gives the bits of the unpacked product, for
// both transposes of A and B, shapes with edge tiles and depths over one
// kc block, and is reused across sizes without allocating.
func TestDgemmPackedMatchesDgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var s Serial64
	var pb PackedB64
	for _, d := range [][3]int{{96, 64, 64}, {96, 191, 127}, {7, 129, 33}, {13, 17, 400}, {300, 2100, 5}, {1, 1, 1}, {5, 3, 0}} {
		m, n, k := d[0], d[1], d[2]
		for _, tr := range [][2]gblas.Transpose{{gblas.NoTrans, gblas.NoTrans}, {gblas.Trans, gblas.NoTrans}, {gblas.NoTrans, gblas.Trans}, {gblas.Trans, gblas.Trans}} {
			a := make([]float64, m*max(1, k)+1)
			b := make([]float64, max(1, k)*n+1)
			c := make([]float64, m*n)
			for i := range a {
				a[i] = rng.NormFloat64()
			}
			for i := range b {
				b[i] = rng.NormFloat64()
			}
			for i := range c {
				c[i] = rng.NormFloat64()
			}
			lda, ldb := max(1, k), n
			if tr[0] == gblas.Trans {
				lda = m
			}
			if tr[1] == gblas.Trans {
				ldb = max(1, k)
			}
			want := append([]float64(nil), c...)
			// The packed algorithm at every size (Dgemm hands the
			// smallest to gonum's loops).
			ref := gemmOp[float64]{kern: kernel64(), aTrans: tr[0] == gblas.Trans, bTrans: tr[1] == gblas.Trans, k: k, alpha: -0.5, a: a, lda: lda, b: b, ldb: ldb, beta: 2, c: want, ldc: n}
			ref.run(0, m, 0, n)
			PackB64(tr[1], k, n, -0.5, b, ldb, &pb)
			s.DgemmPacked(tr[0], m, a, lda, &pb, 2, c, n)
			for i := range c {
				if c[i] != want[i] {
					t.Fatalf("%v %v: c[%d] = %v, want %v bit for bit", d, tr, i, c[i], want[i])
				}
			}
			if al := testing.AllocsPerRun(3, func() {
				PackB64(tr[1], k, n, -0.5, b, ldb, &pb)
				s.DgemmPacked(tr[0], m, a, lda, &pb, 2, c, n)
			}); al != 0 {
				t.Errorf("%v %v: %v allocations per call", d, tr, al)
			}
		}
	}
}
