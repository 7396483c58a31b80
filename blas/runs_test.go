package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
)

// A product over PackB32Runs, which sums only the steps p of k with p mod
// period < keep, gives bit for bit the product over the whole B with its
// other rows zeroed (their values in B are never read), with every kernel
// of the machine, for A read in place or packed, overlapping rows, both
// transposes of A, depths over one kc block (runs cut by the blocks, a
// block with no step), ragged row panels, edge column blocks, beta 0 (over
// NaN), 1 and 0.5; and it does not allocate.
func TestPackB32Runs(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type shape struct {
		m, n, k, lda, period, keep int
		tA                         bool
	}
	shapes := []shape{
		{384, 128, 78, 128, 10, 8, true},    // 8x8 map, 128 channels
		{192, 64, 286, 64, 18, 16, true},    // 16x16: two kc blocks
		{12, 32, 1086, 3, 34, 32, true},     // first layer's padded rows
		{9, 40, 300, 3, 34, 32, true},       // ragged rows, edge columns
		{30, 520, 77, 40, 7, 3, true},       // A packed (many panels)
		{5, 600, 90, 10, 9, 9, false},       // keep = period, NoTrans, packed
		{29, 70, 1000, 1000, 600, 5, false}, // a kc block with no step
		{13, 16, 40, 50, 5, 1, false},
	}
	var s Serial32
	for _, kern := range kernels32() {
		for _, sh := range shapes {
			rows, cols := sh.m, sh.k
			tA := gblas.NoTrans
			if sh.tA {
				rows, cols = sh.k, sh.m
				tA = gblas.Trans
			}
			a := make([]float32, (rows-1)*sh.lda+cols)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			b := make([]float32, sh.k*sh.n)
			zeroed := make([]float32, len(b))
			for p := range sh.k {
				for j := range sh.n {
					b[p*sh.n+j] = float32(rng.NormFloat64())
					if p%sh.period < sh.keep {
						zeroed[p*sh.n+j] = b[p*sh.n+j]
					}
				}
			}
			var runs, dense PackedB32
			runs.p.pack(kern, gblas.NoTrans, sh.k, sh.n, sh.period, sh.keep, 1, b, sh.n)
			dense.p.pack(kern, gblas.NoTrans, sh.k, sh.n, 0, 0, 1, zeroed, sh.n)
			if period, keep := runs.Runs(); period != sh.period || keep != sh.keep {
				t.Fatalf("Runs() = %d, %d", period, keep)
			}
			for _, beta := range []float32{0, 1, 0.5} {
				c0 := make([]float32, sh.m*sh.n)
				for i := range c0 {
					c0[i] = float32(rng.NormFloat64())
				}
				if beta == 0 {
					c0[3] = float32(math.NaN())
				}
				want := append([]float32(nil), c0...)
				s.SgemmPackedOverlapA(tA, sh.m, a, sh.lda, &dense, beta, want, sh.n)
				got := append([]float32(nil), c0...)
				s.SgemmPackedOverlapA(tA, sh.m, a, sh.lda, &runs, beta, got, sh.n)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s %+v beta %v: c[%d] = %v, want %v bit for bit", kern.name, sh, beta, i, got[i], want[i])
					}
				}
			}
			c := make([]float32, sh.m*sh.n)
			if al := testing.AllocsPerRun(3, func() {
				s.SgemmPackedOverlapA(tA, sh.m, a, sh.lda, &runs, 0, c, sh.n)
				runs.p.pack(kern, gblas.NoTrans, sh.k, sh.n, sh.period, sh.keep, 1, b, sh.n)
			}); al != 0 {
				t.Errorf("%s %+v: %v allocations per product and packing", kern.name, sh, al)
			}
		}
	}
	for _, bad := range [][2]int{{0, 0}, {3, 0}, {3, 4}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("period %d keep %d: no panic", bad[0], bad[1])
				}
			}()
			var pb PackedB32
			PackB32Runs(2, 2, bad[0], bad[1], 1, make([]float32, 4), 2, &pb)
		}()
	}
}

// A product over runs of rows (SgemmPackedRows) gives every row of the
// runs the bits of the whole product, and leaves every other row as it
// was or at its product's value, with every kernel of the machine: runs
// of whole 8-row tiles, a run cut short by m, runs the kernel's tile does
// not divide, depths over one kc block, edge columns, beta 0 (over NaN)
// and 1.
func TestSgemmPackedRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	type shape struct{ m, n, k, lda, period, keep int }
	shapes := []shape{
		{84, 128, 384, 128, 10, 8},
		{288, 64, 192, 64, 18, 16},
		{1092, 32, 96, 32, 34, 32},
		{75, 16, 40, 8, 10, 8},
		{70, 40, 600, 30, 10, 8},
		{84, 32, 48, 16, 10, 6},
		{30, 32, 20, 4, 9, 9},
	}
	var s Serial32
	for _, kern := range kernels32() {
		for _, sh := range shapes {
			a := make([]float32, (sh.m-1)*sh.lda+sh.k)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			b := make([]float32, sh.k*sh.n)
			for i := range b {
				b[i] = float32(rng.NormFloat64())
			}
			var pb PackedB32
			pb.p.pack(kern, gblas.NoTrans, sh.k, sh.n, 0, 0, 1, b, sh.n)
			for _, beta := range []float32{0, 1} {
				c0 := make([]float32, sh.m*sh.n)
				for i := range c0 {
					c0[i] = float32(rng.NormFloat64())
				}
				if beta == 0 {
					c0[2] = float32(math.NaN())
				}
				want := append([]float32(nil), c0...)
				s.SgemmPackedOverlapA(gblas.NoTrans, sh.m, a, sh.lda, &pb, beta, want, sh.n)
				got := append([]float32(nil), c0...)
				s.SgemmPackedRows(sh.m, sh.period, sh.keep, a, sh.lda, &pb, beta, got, sh.n)
				for i := range want {
					bits := math.Float32bits(got[i])
					if bits == math.Float32bits(want[i]) {
						continue
					}
					if (i/sh.n)%sh.period < sh.keep || bits != math.Float32bits(c0[i]) {
						t.Fatalf("%s %+v beta %v: c[%d] = %v, want %v (or, between runs, %v)", kern.name, sh, beta, i, got[i], want[i], c0[i])
					}
				}
			}
		}
	}
}

// packB writes every panel entry as alpha op(B)(pc+p, jc+jr+j), zero past
// the block's columns, for both transposes, NR of every kernel, rows
// contiguous (ldb = NR: one copy) or not, edge column panels, alpha 1
// (the row copies) and not, float32 and float64.
func TestPackB(t *testing.T) {
	testPackB[float32](t)
	testPackB[float64](t)
}

func testPackB[T float32 | float64](t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, nr := range []int{4, 8, 16, 32} {
		for _, sh := range [][2]int{{nr, nr}, {nr + 3, nr}, {2 * nr, 2 * nr}, {3*nr + 5, 2*nr + 3}, {nr, nr - 1}} {
			ldb, nc := sh[0], sh[1]
			for _, trans := range []bool{false, true} {
				for _, alpha := range []T{1, 0.5} {
					const pc, jc, kc = 3, 0, 7
					rows := pc + kc
					if trans {
						rows = jc + nc
					}
					b := make([]T, rows*ldb)
					for i := range b {
						b[i] = T(rng.NormFloat64())
					}
					kb := pc + kc
					if trans && ldb < kb {
						continue
					}
					np := (nc + nr - 1) / nr
					dst := make([]T, np*nr*kc)
					for i := range dst {
						dst[i] = T(math.NaN())
					}
					packB(dst, b, ldb, trans, pc, jc, kc, nc, nr, alpha)
					for jr := 0; jr < np*nr; jr += nr {
						for p := range kc {
							for j := range nr {
								want := T(0)
								if c := jc + jr + j; jr+j < nc {
									if trans {
										want = alpha * b[c*ldb+pc+p]
									} else {
										want = alpha * b[(pc+p)*ldb+c]
									}
								}
								if got := dst[jr*kc+p*nr+j]; got != want {
									t.Fatalf("nr %d ldb %d nc %d trans %v alpha %v: panel %d entry (%d, %d) = %v, want %v", nr, ldb, nc, trans, alpha, jr/nr, p, j, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}
