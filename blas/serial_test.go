package blas

import (
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

func TestSerial32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s Serial32
	for _, d := range [][3]int{{1, 300, 200}, {200, 1, 300}, {3, 4, 5}, {64, 128, 1152}, {1024, 32, 27}, {288, 32, 1024}, {7, 129, 33}} {
		m, n, k := d[0], d[1], d[2]
		for _, tr := range [][2]gblas.Transpose{{gblas.NoTrans, gblas.NoTrans}, {gblas.Trans, gblas.NoTrans}, {gblas.NoTrans, gblas.Trans}} {
			a := make([]float32, m*k)
			b := make([]float32, k*n)
			c := make([]float32, m*n)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			for i := range b {
				b[i] = float32(rng.NormFloat64())
			}
			for i := range c {
				c[i] = float32(rng.NormFloat64())
			}
			lda, ldb := k, n
			if tr[0] == gblas.Trans {
				lda = m
			}
			if tr[1] == gblas.Trans {
				ldb = k
			}
			want := append([]float32(nil), c...)
			gonum.Implementation{}.Sgemm(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, want, n)
			s.Sgemm(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, c, n)
			for i := range c {
				if d := c[i] - want[i]; d > 1e-3 || d < -1e-3 {
					t.Fatalf("%v %v: c[%d] = %v, want %v", d, tr, i, c[i], want[i])
				}
			}
			if al := testing.AllocsPerRun(3, func() {
				s.Sgemm(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, c, n)
			}); al != 0 {
				t.Errorf("%v %v: %v allocations per call", d, tr, al)
			}
		}
	}
}

func TestSerial64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s Serial64
	for _, d := range [][3]int{{1, 300, 200}, {200, 1, 300}, {3, 4, 5}, {64, 128, 1152}, {1024, 32, 27}, {288, 32, 1024}, {7, 129, 33}} {
		m, n, k := d[0], d[1], d[2]
		for _, tr := range [][2]gblas.Transpose{{gblas.NoTrans, gblas.NoTrans}, {gblas.Trans, gblas.NoTrans}, {gblas.NoTrans, gblas.Trans}} {
			a := make([]float64, m*k)
			b := make([]float64, k*n)
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
			lda, ldb := k, n
			if tr[0] == gblas.Trans {
				lda = m
			}
			if tr[1] == gblas.Trans {
				ldb = k
			}
			want := append([]float64(nil), c...)
			gonum.Implementation{}.Dgemm(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, want, n)
			s.Dgemm(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, c, n)
			for i := range c {
				if d := c[i] - want[i]; d > 1e-10 || d < -1e-10 {
					t.Fatalf("%v %v: c[%d] = %v, want %v", d, tr, i, c[i], want[i])
				}
			}
			if al := testing.AllocsPerRun(3, func() {
				s.Dgemm(tr[0], tr[1], m, n, k, 0.5, a, lda, b, ldb, 2, c, n)
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
			var ref Serial64
			ref.s.gemm(kernel64(), tr[0], tr[1], m, n, k, -0.5, a, lda, b, ldb, 2, want, n)
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
