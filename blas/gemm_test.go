package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// gemmCase is one product to check.
type gemmCase struct {
	tA, tB           bool
	m, n, k          int
	padA, padB, padC int // extra leading-dimension elements
	alpha, beta      float64
	nanA, nanB, nanC bool // inject a NaN into A, B, or (all of) C
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d pad=%d/%d/%d alpha=%g beta=%g nan=%v/%v/%v",
		tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.padA, tc.padB, tc.padC, tc.alpha, tc.beta, tc.nanA, tc.nanB, tc.nanC)
}

func trans(t bool) gblas.Transpose {
	if t {
		return gblas.Trans
	}
	return gblas.NoTrans
}

// operands builds A, B, C for tc. Elements outside the logical matrices
// (stride padding) hold a sentinel so that reading them shows up as a
// wrong answer and writing them is detectable.
func operands[T float32 | float64](tc gemmCase, rng *rand.Rand) (a []T, lda int, b []T, ldb int, c []T, ldc int) {
	const sentinel = 1e30
	ar, ac := tc.m, tc.k
	if tc.tA {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.tB {
		br, bc = tc.n, tc.k
	}
	fill := func(r, cols, pad int) ([]T, int) {
		ld := max(1, cols+pad)
		s := make([]T, max(0, (r-1)*ld+cols))
		for i := range s {
			if i%ld < cols {
				s[i] = T(rng.Float64()*2 - 1)
			} else {
				s[i] = sentinel
			}
		}
		return s, ld
	}
	a, lda = fill(ar, ac, tc.padA)
	b, ldb = fill(br, bc, tc.padB)
	c, ldc = fill(tc.m, tc.n, tc.padC)
	if tc.nanA && len(a) > 0 {
		a[rng.IntN(ar)*lda+rng.IntN(ac)] = T(math.NaN())
	}
	if tc.nanB && len(b) > 0 {
		b[rng.IntN(br)*ldb+rng.IntN(bc)] = T(math.NaN())
	}
	if tc.nanC {
		for i := range tc.m {
			for j := range tc.n {
				c[i*ldc+j] = T(math.NaN())
			}
		}
	}
	return a, lda, b, ldb, c, ldc
}

// checkResult compares got with a float64 reference computed from the
// original operands. The tolerance is the standard forward error bound of
// a dot product of length k, scaled: |err| <= 2(k+2)u(|alpha| sum|a||b| +
// |beta c|), u the unit roundoff of T. NaN must appear exactly where the
// reference has NaN, and stride padding of C must be untouched.
func checkResult[T float32 | float64](t *testing.T, tc gemmCase, a []T, lda int, b []T, ldb int, c0, got []T, ldc int) {
	t.Helper()
	u := 0x1p-53
	var zero T
	if _, ok := any(zero).(float32); ok {
		u = 0x1p-24
	}
	at := func(i, p int) float64 {
		if tc.tA {
			return float64(a[p*lda+i])
		}
		return float64(a[i*lda+p])
	}
	bt := func(p, j int) float64 {
		if tc.tB {
			return float64(b[j*ldb+p])
		}
		return float64(b[p*ldb+j])
	}
	bad := 0
	for i := range tc.m {
		for j := range tc.n {
			var sum, abs float64
			if tc.alpha != 0 {
				for p := range tc.k {
					x := at(i, p) * bt(p, j)
					sum += x
					abs += math.Abs(x)
				}
			}
			want := tc.alpha * sum
			bound := math.Abs(tc.alpha) * abs
			if tc.beta != 0 {
				cv := float64(c0[i*ldc+j])
				want += tc.beta * cv
				bound += math.Abs(tc.beta * cv)
			}
			tol := 2*float64(tc.k+2)*u*bound + 1e-300
			g := float64(got[i*ldc+j])
			ok := math.IsNaN(want) && math.IsNaN(g) || math.Abs(g-want) <= tol
			if !ok {
				if bad < 5 {
					t.Errorf("%v: C[%d,%d] = %v, want %v (tol %g)", tc, i, j, g, want, tol)
				}
				bad++
			}
		}
		for j := tc.n; i < tc.m-1 && j < ldc; j++ {
			if got[i*ldc+j] != c0[i*ldc+j] {
				t.Fatalf("%v: padding C[%d,%d] overwritten", tc, i, j)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%v: %d wrong elements", tc, bad)
	}
}

// runCase checks the packed driver with kernel kern and procs goroutines.
func runCase[T float32 | float64](t *testing.T, kern kernel[T], procs int, tc gemmCase, rng *rand.Rand) {
	t.Helper()
	a, lda, b, ldb, c, ldc := operands[T](tc, rng)
	c0 := append([]T(nil), c...)
	gemm(kern, procs, tc.tA, tc.tB, tc.m, tc.n, tc.k, T(tc.alpha), a, lda, b, ldb, T(tc.beta), c, ldc)
	checkResult(t, tc, a, lda, b, ldb, c0, c, ldc)
}

// variants returns kern as configured, with A always read in place, and
// with tiny blocking (A packed, and A in place) so that small test
// products cross every block boundary (several jc, pc and ic iterations,
// edge tiles).
func variants[T float32 | float64](kern kernel[T]) []kernel[T] {
	inPlace := kern
	inPlace.packMin = 1 << 30
	inPlace.name += "-inplace"
	small := kern
	small.kc, small.mc, small.nc = 7, 2*kern.mr, 3*kern.nr
	small.packMin = 0
	small.parallelMin = 0 // exercise the m, n and k splits
	small.name += "-small-packed"
	smallInPlace := small
	smallInPlace.packMin = 1 << 30
	smallInPlace.name = kern.name + "-small-inplace"
	return []kernel[T]{kern, inPlace, small, smallInPlace}
}

func testCases(rng *rand.Rand, n int) []gemmCase {
	dims := []int{1, 2, 3, 5, 7, 13, 17, 31, 33, 40, 65}
	scalars := []float64{0, 1, -1, 0.37, -2.5}
	var cs []gemmCase
	// Fixed edge shapes: vectors, k = 0 and 1.
	for _, sh := range [][3]int{{1, 37, 19}, {37, 1, 19}, {1, 1, 50}, {29, 31, 0}, {29, 31, 1}, {64, 64, 64}, {100, 3, 200}, {3, 100, 200}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				cs = append(cs, gemmCase{tA: ta, tB: tb, m: sh[0], n: sh[1], k: sh[2], padA: 3, padB: 0, padC: 2, alpha: 0.75, beta: -0.5})
			}
		}
	}
	for range n {
		tc := gemmCase{
			tA: rng.IntN(2) == 0, tB: rng.IntN(2) == 0,
			m: dims[rng.IntN(len(dims))], n: dims[rng.IntN(len(dims))], k: dims[rng.IntN(len(dims))],
			alpha: scalars[rng.IntN(len(scalars))], beta: scalars[rng.IntN(len(scalars))],
		}
		if rng.IntN(2) == 0 {
			tc.padA, tc.padB, tc.padC = rng.IntN(5), rng.IntN(5), rng.IntN(5)
		}
		switch rng.IntN(6) {
		case 0:
			tc.nanA = true
		case 1:
			tc.nanB = true
		case 2:
			tc.nanC = true
			tc.beta = 0
		}
		cs = append(cs, tc)
	}
	return cs
}

func TestGemmKernels32(t *testing.T) {
	for _, kern := range kernels32() {
		for _, k := range variants(kern) {
			t.Run(k.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, 2))
				for _, tc := range testCases(rng, 150) {
					runCase(t, k, 1+rng.IntN(2), tc, rng)
				}
			})
		}
	}
}

func TestGemmKernels64(t *testing.T) {
	for _, kern := range kernels64() {
		for _, k := range variants(kern) {
			t.Run(k.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(3, 4))
				for _, tc := range testCases(rng, 150) {
					runCase(t, k, 1+rng.IntN(2), tc, rng)
				}
			})
		}
	}
}

// TestKernelsLarge crosses the real block sizes (k > kc, m > mc) of every
// kernel, with both goroutine splits (m and n larger).
func TestKernelsLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: large products take seconds")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := [][3]int{{517, 301, 530}, {301, 517, 530}}
	for _, sh := range shapes {
		tc := gemmCase{tA: rng.IntN(2) == 0, tB: rng.IntN(2) == 0, m: sh[0], n: sh[1], k: sh[2], padA: 1, padB: 2, padC: 3, alpha: 1.5, beta: 0.5}
		for _, kern := range kernels32() {
			for _, k := range variants(kern)[:2] {
				runCase(t, k, 2, tc, rng)
			}
		}
		for _, kern := range kernels64() {
			for _, k := range variants(kern)[:2] {
				runCase(t, k, 2, tc, rng)
			}
		}
	}
}

// TestAlphaZeroDoesNotReadAB fills A and B with NaN: with alpha = 0 the
// result must be beta*C exactly, as in reference BLAS.
func TestAlphaZeroDoesNotReadAB(t *testing.T) {
	const m, n, k = 40, 50, 60
	a := make([]float64, m*k)
	b := make([]float64, k*n)
	for i := range a {
		a[i] = math.NaN()
	}
	for i := range b {
		b[i] = math.NaN()
	}
	c := make([]float64, m*n)
	for i := range c {
		c[i] = float64(i)
	}
	Dgemm(gblas.NoTrans, gblas.NoTrans, m, n, k, 0, a, k, b, n, 2, c, n)
	for i, v := range c {
		if v != 2*float64(i) {
			t.Fatalf("c[%d] = %v, want %v", i, v, 2*float64(i))
		}
	}
}

// TestPublicAgainstGonum checks the exported functions (which pick the
// native path for small products and split large ones across goroutines)
// against gonum's implementation.
func TestPublicAgainstGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, sh := range [][3]int{{1, 70, 30}, {70, 1, 30}, {10, 10, 10}, {130, 70, 90}, {70, 130, 90}, {200, 200, 200}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				tc := gemmCase{tA: ta, tB: tb, m: sh[0], n: sh[1], k: sh[2], padA: 1, padC: 2, alpha: -1.25, beta: 0.5}
				a, lda, b, ldb, c, ldc := operands[float64](tc, rng)
				want := append([]float64(nil), c...)
				gonum.Implementation{}.Dgemm(trans(ta), trans(tb), tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
				Dgemm(trans(ta), trans(tb), tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
				tol := 1e-12 * float64(tc.k)
				for i := range c {
					if math.Abs(c[i]-want[i]) > tol {
						t.Fatalf("%v: Dgemm c[%d] = %v, gonum %v", tc, i, c[i], want[i])
					}
				}
				a32, lda, b32, ldb, c32, ldc := operands[float32](tc, rng)
				want32 := append([]float32(nil), c32...)
				gonum.Implementation{}.Sgemm(trans(ta), trans(tb), tc.m, tc.n, tc.k, float32(tc.alpha), a32, lda, b32, ldb, float32(tc.beta), want32, ldc)
				Sgemm(trans(ta), trans(tb), tc.m, tc.n, tc.k, float32(tc.alpha), a32, lda, b32, ldb, float32(tc.beta), c32, ldc)
				tol32 := 2e-6 * float64(tc.k)
				for i := range c32 {
					if math.Abs(float64(c32[i]-want32[i])) > tol32 {
						t.Fatalf("%v: Sgemm c[%d] = %v, gonum %v", tc, i, c32[i], want32[i])
					}
				}
			}
		}
	}
}

// TestPanics checks that invalid arguments panic with gonum's messages.
func TestPanics(t *testing.T) {
	s := make([]float64, 100)
	cases := []struct {
		name string
		f    func()
		want string
	}{
		{"transpose", func() { Dgemm('x', gblas.NoTrans, 2, 2, 2, 1, s, 2, s, 2, 0, s, 2) }, badTranspose},
		{"m", func() { Dgemm(gblas.NoTrans, gblas.NoTrans, -1, 2, 2, 1, s, 2, s, 2, 0, s, 2) }, mLT0},
		{"lda", func() { Dgemm(gblas.NoTrans, gblas.NoTrans, 2, 2, 3, 1, s, 2, s, 2, 0, s, 2) }, badLdA},
		{"ldc", func() { Dgemm(gblas.NoTrans, gblas.NoTrans, 2, 3, 2, 1, s, 2, s, 3, 0, s, 2) }, badLdC},
		{"shortB", func() { Dgemm(gblas.NoTrans, gblas.NoTrans, 1, 2, 60, 1, s, 60, s, 2, 0, s, 2) }, shortB},
	}
	for _, tc := range cases {
		func() {
			defer func() {
				if r := recover(); r != tc.want {
					t.Errorf("%s: panic %v, want %q", tc.name, r, tc.want)
				}
			}()
			tc.f()
		}()
	}
}

func fuzzCase(m, n, k uint8, flags uint8, alpha, beta float64) (gemmCase, bool) {
	if math.IsNaN(alpha) || math.IsInf(alpha, 0) || math.IsNaN(beta) || math.IsInf(beta, 0) || math.Abs(alpha) > 1e3 || math.Abs(beta) > 1e3 {
		return gemmCase{}, false
	}
	tc := gemmCase{
		tA: flags&1 != 0, tB: flags&2 != 0,
		m: int(m%80) + 1, n: int(n%80) + 1, k: int(k % 90),
		padA: int(flags>>2) & 3, padB: int(flags>>4) & 3, padC: int(flags>>6) & 3,
		alpha: alpha, beta: beta,
	}
	return tc, true
}

func FuzzSgemm(f *testing.F) {
	f.Add(uint8(7), uint8(33), uint8(19), uint8(0), 1.0, 0.0)
	f.Add(uint8(64), uint8(1), uint8(3), uint8(0xff), -0.5, 2.0)
	f.Add(uint8(40), uint8(40), uint8(0), uint8(5), 1.0, -1.0)
	f.Fuzz(func(t *testing.T, m, n, k, flags uint8, alpha, beta float64) {
		tc, ok := fuzzCase(m, n, k, flags, alpha, beta)
		if !ok {
			t.Skip("skipped because the fuzz input lies outside the valid argument domain")
		}
		rng := rand.New(rand.NewPCG(uint64(m)<<16|uint64(n)<<8|uint64(k), uint64(flags)))
		for _, kern := range kernels32() {
			for _, k := range variants(kern) {
				runCase(t, k, 2, tc, rng)
			}
		}
		a, lda, b, ldb, c, ldc := operands[float32](tc, rng)
		c0 := append([]float32(nil), c...)
		Sgemm(trans(tc.tA), trans(tc.tB), tc.m, tc.n, tc.k, float32(tc.alpha), a, lda, b, ldb, float32(tc.beta), c, ldc)
		checkResult(t, tc, a, lda, b, ldb, c0, c, ldc)
	})
}

func FuzzDgemm(f *testing.F) {
	f.Add(uint8(7), uint8(33), uint8(19), uint8(0), 1.0, 0.0)
	f.Add(uint8(64), uint8(1), uint8(3), uint8(0xff), -0.5, 2.0)
	f.Add(uint8(40), uint8(40), uint8(0), uint8(5), 1.0, -1.0)
	f.Fuzz(func(t *testing.T, m, n, k, flags uint8, alpha, beta float64) {
		tc, ok := fuzzCase(m, n, k, flags, alpha, beta)
		if !ok {
			t.Skip("skipped because the fuzz input lies outside the valid argument domain")
		}
		rng := rand.New(rand.NewPCG(uint64(m)<<16|uint64(n)<<8|uint64(k), uint64(flags)))
		for _, kern := range kernels64() {
			for _, k := range variants(kern) {
				runCase(t, k, 2, tc, rng)
			}
		}
		a, lda, b, ldb, c, ldc := operands[float64](tc, rng)
		c0 := append([]float64(nil), c...)
		Dgemm(trans(tc.tA), trans(tc.tB), tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
		checkResult(t, tc, a, lda, b, ldb, c0, c, ldc)
	})
}
