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

// The float32 prepacked operand (a layer's weight packed once per step)
// gives the bits of Serial32.Sgemm, for beta 0, 1 and other, at sizes
// Sgemm packs and the smallest, which it does not.
func TestSgemmPackedMatchesSgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var s Serial32
	var pb PackedB32
	for _, d := range [][3]int{{96, 64, 64}, {4, 128, 2048}, {4096, 32, 27}, {256, 1152, 128}, {7, 129, 33}, {13, 17, 400}, {1, 1, 1}, {5, 3, 0}, {4, 5, 3}, {8, 8, 8}, {1, 10, 128}} {
		m, n, k := d[0], d[1], d[2]
		for _, tr := range [][2]gblas.Transpose{{gblas.NoTrans, gblas.NoTrans}, {gblas.Trans, gblas.NoTrans}, {gblas.NoTrans, gblas.Trans}, {gblas.Trans, gblas.Trans}} {
			for _, beta := range []float32{0, 1, -1.5} {
				a := make([]float32, m*max(1, k)+1)
				b := make([]float32, max(1, k)*n+1)
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
				lda, ldb := max(1, k), n
				if tr[0] == gblas.Trans {
					lda = m
				}
				if tr[1] == gblas.Trans {
					ldb = max(1, k)
				}
				want := append([]float32(nil), c...)
				// Serial32.Sgemm: the packed path, or gonum's loops for
				// the smallest products.
				s.Sgemm(tr[0], tr[1], m, n, k, 1, a, lda, b, ldb, beta, want, n)
				PackB32(tr[1], k, n, 1, b, ldb, &pb)
				s.SgemmPacked(tr[0], m, a, lda, &pb, beta, c, n)
				for i := range c {
					if c[i] != want[i] {
						t.Fatalf("%v %v beta %v: c[%d] = %v, want %v bit for bit", d, tr, beta, i, c[i], want[i])
					}
				}
			}
		}
	}
}

// An A with overlapping rows (the windows of an implicit im2col) gives,
// bit for bit, the product of the same rows copied out into an ordinary
// matrix, unpacked and prepacked B alike.
func TestSgemmOverlapA(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var s Serial32
	var pb PackedB32
	for _, d := range [][4]int{{1086, 32, 96, 32}, {78, 128, 384, 128}, {27, 32, 1086, 3}, {1152, 64, 80, 128}, {5, 7, 9, 2}, {13, 3, 40, 1}} {
		m, n, k, lda := d[0], d[1], d[2], d[3]
		for _, tA := range []gblas.Transpose{gblas.NoTrans, gblas.Trans} {
			for _, beta := range []float32{0, 1} {
				rows, cols := m, k
				if tA == gblas.Trans {
					rows, cols = k, m
				}
				a := make([]float32, (rows-1)*lda+cols)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
				}
				dense := make([]float32, rows*cols)
				for r := range rows {
					copy(dense[r*cols:(r+1)*cols], a[r*lda:r*lda+cols])
				}
				b := make([]float32, k*n)
				for i := range b {
					b[i] = float32(rng.NormFloat64())
				}
				c0 := make([]float32, m*n)
				for i := range c0 {
					c0[i] = float32(rng.NormFloat64())
				}
				want := append([]float32(nil), c0...)
				gemm(kernel32(), 1, tA == gblas.Trans, false, m, n, k, 1, dense, cols, b, n, beta, want, n)
				got := append([]float32(nil), c0...)
				s.SgemmOverlapA(tA, gblas.NoTrans, m, n, k, 1, a, lda, b, n, beta, got, n)
				PackB32(gblas.NoTrans, k, n, 1, b, n, &pb)
				gotP := append([]float32(nil), c0...)
				s.SgemmPackedOverlapA(tA, m, a, lda, &pb, beta, gotP, n)
				for i := range want {
					if got[i] != want[i] || gotP[i] != want[i] {
						t.Fatalf("%v %v beta %v: c[%d] = %v (packed B %v), want %v bit for bit", d, tA, beta, i, got[i], gotP[i], want[i])
					}
				}
			}
		}
	}
	// A product of depth 0 sets C to beta C (it once panicked on A's
	// length when m > 2).
	PackB32(gblas.NoTrans, 0, 2, 1, nil, 2, &pb)
	c := []float32{1, 2, 3, 4, 5, 6}
	s.SgemmOverlapA(gblas.NoTrans, gblas.NoTrans, 3, 2, 0, 1, nil, 1, nil, 2, 2, c, 2)
	s.SgemmPackedOverlapA(gblas.NoTrans, 3, nil, 1, &pb, 0.5, c, 2)
	for i, v := range c {
		if v != float32(i+1) {
			t.Fatalf("depth 0: c = %v, want 1..6", c)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a short overlapping A did not panic")
		}
	}()
	s.SgemmOverlapA(gblas.NoTrans, gblas.NoTrans, 4, 2, 5, 1, make([]float32, 3*2+4), 2, make([]float32, 10), 2, 0, make([]float32, 8), 2)
}

// The products over a packed B give the same bits with and without the
// kernels' prefetch of the next micro-panel and, for a transposed A, of
// A's next rows (PackedB32.SetPrefetch), on shapes with full and edge row
// tiles, A read in place and packed (transposed A with 16 or more
// micro-panels of B), several blocks of k and of n, beta 0 and 1, and B
// packed whole and in runs of k (PackB32Runs).
func TestSgemmPackedPrefetch(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var s Serial32
	var on, off PackedB32
	off.SetPrefetch(false)
	for _, d := range [][3]int{{128, 256, 2304}, {36, 640, 300}, {250, 4160, 20}, {24, 64, 1086}, {13, 17, 400}, {12, 32, 4}} {
		m, n, k := d[0], d[1], d[2]
		for _, tA := range []gblas.Transpose{gblas.NoTrans, gblas.Trans} {
			a := make([]float32, m*k)
			b := make([]float32, k*n)
			c0 := make([]float32, m*n)
			for _, x := range [][]float32{a, b, c0} {
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
			}
			lda := k
			if tA == gblas.Trans {
				lda = m
			}
			for _, runs := range []bool{false, true} {
				if runs {
					PackB32Runs(k, n, 11, 9, 1, b, n, &on)
					PackB32Runs(k, n, 11, 9, 1, b, n, &off)
				} else {
					PackB32(gblas.NoTrans, k, n, 1, b, n, &on)
					PackB32(gblas.NoTrans, k, n, 1, b, n, &off)
				}
				for _, beta := range []float32{0, 1} {
					got := append([]float32(nil), c0...)
					want := append([]float32(nil), c0...)
					s.SgemmPacked(tA, m, a, lda, &on, beta, got, n)
					s.SgemmPacked(tA, m, a, lda, &off, beta, want, n)
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%v tA %v runs %v beta %v: c[%d] = %v with prefetch, %v without", d, tA, runs, beta, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// SgemmPackedRows gives the same bits with and without the rows
// kernel's prefetch of the next micro-panel (PackedB32.SetPrefetch), on
// an implicit convolution's shapes: runs of 16 and 8 rows of 18 and 10,
// windows 128 and 64 floats apart, two blocks of k, an edge column
// block.
func TestSgemmPackedRowsPrefetch(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var s Serial32
	var on, off PackedB32
	off.SetPrefetch(false)
	for _, d := range []struct{ m, n, k, lda, period, keep int }{{286, 128, 384, 128, 18, 16}, {98, 80, 300, 64, 10, 8}} {
		a := make([]float32, (d.m-1)*d.lda+d.k)
		b := make([]float32, d.k*d.n)
		c0 := make([]float32, d.m*d.n)
		for _, x := range [][]float32{a, b, c0} {
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
		}
		PackB32(gblas.NoTrans, d.k, d.n, 1, b, d.n, &on)
		PackB32(gblas.NoTrans, d.k, d.n, 1, b, d.n, &off)
		for _, beta := range []float32{0, 1} {
			got := append([]float32(nil), c0...)
			want := append([]float32(nil), c0...)
			s.SgemmPackedRows(d.m, d.period, d.keep, a, d.lda, &on, beta, got, d.n)
			s.SgemmPackedRows(d.m, d.period, d.keep, a, d.lda, &off, beta, want, d.n)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%+v beta %v: c[%d] = %v with prefetch, %v without", d, beta, i, got[i], want[i])
				}
			}
		}
	}
}

// A PrefetchStream leaves SgemmPackedRows' bits as they are and is used
// up a line every four steps of k of each whole-tile kernel call that
// prefetches (on AVX-512, where the rows kernel has a prefetching
// variant): on an implicit convolution's shape (runs of 8 rows of 10,
// two blocks of k, 128 columns).
func TestPrefetchStream(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const m, n, k, lda, period, keep = 78, 128, 384, 128, 10, 8
	a := make([]float32, (m-1)*lda+k)
	b := make([]float32, k*n)
	c0 := make([]float32, m*n)
	for _, x := range [][]float32{a, b, c0} {
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
	}
	var pb PackedB32
	PackB32(gblas.NoTrans, k, n, 1, b, n, &pb)
	stream := make([]float32, 1<<18)
	var s, ref Serial32
	for _, beta := range []float32{0, 1} {
		got := append([]float32(nil), c0...)
		want := append([]float32(nil), c0...)
		s.PrefetchStream(stream)
		s.SgemmPackedRows(m, period, keep, a, lda, &pb, beta, got, n)
		ref.SgemmPackedRows(m, period, keep, a, lda, &pb, beta, want, n)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("beta %v: c[%d] = %v with a stream, %v without", beta, i, got[i], want[i])
			}
		}
		used := len(stream) - s.Streaming()
		kern := kernel32()
		if kern.rowsPF == nil || kern.rowsMR != keep {
			if used != 0 {
				t.Fatalf("%d streamed without a prefetching rows kernel", used)
			}
			continue
		}
		// 8 tiles of rows a column panel, 4 panels, blocks of k of 256
		// and 128: (64 + 32) lines a tile and panel.
		if want := 8 * 4 * (256 + 128) / 4 * 16; used != want {
			t.Fatalf("beta %v: %d elements streamed, want %d", beta, used, want)
		}
	}
	s.PrefetchStream(nil)
	if s.Streaming() != 0 {
		t.Fatal("a nil stream left something to stream")
	}
}
