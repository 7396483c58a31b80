// Package linalg holds the dense linear algebra the mechanisms of package
// mfnoise share: Gram matrices and products over the short row spans of
// tree, banded and stamped encoders, the application of a workload to a
// prefix-sum decoder (SPEC 2), a recursive LU factorization on the
// process-wide BLAS, and the fixed-order splitting of loops over cores the
// optimizers use.
package linalg

import (
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"gonum.org/v1/gonum/dsp/fourier"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// RowSpans returns, for each row of c, the half-open column range [lo, hi)
// holding its nonzeros (lo = hi for a zero row) and the total span. Tree,
// banded and stamped (block-diagonal) encoders have short spans, so products
// over the spans with vectorized axpy beat dense BLAS by a wide margin.
func RowSpans(c *mat.Dense) (lo, hi []int, total int) {
	m, _ := c.Dims()
	lo = make([]int, m)
	hi = make([]int, m)
	for r := 0; r < m; r++ {
		row := c.RawRowView(r)
		l, h := len(row), 0
		for j, v := range row {
			if v != 0 {
				l = j
				break
			}
		}
		for j := len(row) - 1; j >= l; j-- {
			if row[j] != 0 {
				h = j + 1
				break
			}
		}
		if h > l {
			lo[r], hi[r] = l, h
			total += h - l
		}
	}
	return lo, hi, total
}

// spanWorthIt reports whether span kernels costing work flops beat a dense
// product costing dense flops; dense BLAS uses both cores and blocking, so it
// gets a handicap of about 3.
func spanWorthIt(work, dense float64) bool { return work < dense/3 }

func asDense(a mat.Matrix) *mat.Dense {
	if d, ok := a.(*mat.Dense); ok {
		return d
	}
	return mat.DenseCopyOf(a)
}

// Gram returns X = C^T C. Encoders with short row spans (trees, bands)
// accumulate the outer products of their rows over the spans; encoders whose
// row blocks have narrow column ranges (lower-triangular, stamped) take one
// GEMM per block of rows; the rest one dense GEMM, which in gonum is several
// times faster than SymOuterK.
func Gram(cm mat.Matrix) *mat.SymDense {
	c := asDense(cm)
	m, n := c.Dims()
	x := mat.NewSymDense(n, nil)
	lo, hi, _ := RowSpans(c)
	work := 0.0
	for r := range lo {
		l := float64(hi[r] - lo[r])
		work += l * l / 2
	}
	const rowBlock = 128
	blocked := 0.0
	for r0 := 0; r0 < m; r0 += rowBlock {
		l, h := blockSpan(lo, hi, r0, min(r0+rowBlock, m))
		blocked += float64(min(rowBlock, m-r0)) * float64(h-l) * float64(h-l)
	}
	dense := float64(m) * float64(n) * float64(n)
	switch {
	case spanWorthIt(work, min(blocked, dense)):
		GramSpans(x, c, lo, hi)
	case blocked < dense/2:
		GramBlocked(x, c, lo, hi, rowBlock)
	default:
		GramDense(x, c)
	}
	return x
}

// GramSpans adds the outer products of the rows of c over their spans.
func GramSpans(x *mat.SymDense, c *mat.Dense, lo, hi []int) {
	m, _ := c.Dims()
	raw := x.RawSymmetric()
	for r := 0; r < m; r++ {
		row := c.RawRowView(r)
		for a := lo[r]; a < hi[r]; a++ {
			if v := row[a]; v != 0 {
				floats.AddScaled(raw.Data[a*raw.Stride+a:a*raw.Stride+hi[r]], v, row[a:hi[r]])
			}
		}
	}
}

// GramBlocked adds R^T R for each block R of rowBlock rows restricted to the
// union of its row spans.
func GramBlocked(x *mat.SymDense, c *mat.Dense, lo, hi []int, rowBlock int) {
	m, n := c.Dims()
	raw := x.RawSymmetric()
	buf := make([]float64, n*n)
	for r0 := 0; r0 < m; r0 += rowBlock {
		r1 := min(r0+rowBlock, m)
		l, h := blockSpan(lo, hi, r0, r1)
		if h <= l {
			continue
		}
		blk := c.Slice(r0, r1, l, h)
		prod := mat.NewDense(h-l, h-l, buf[:(h-l)*(h-l)])
		prod.Mul(blk.T(), blk)
		for i := 0; i < h-l; i++ {
			floats.Add(raw.Data[(l+i)*raw.Stride+l+i:(l+i)*raw.Stride+h], prod.RawRowView(i)[i:])
		}
	}
}

// GramDense sets x = C^T C by one GEMM.
func GramDense(x *mat.SymDense, c *mat.Dense) {
	_, n := c.Dims()
	var d mat.Dense
	d.Mul(c.T(), c)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			x.SetSym(i, j, 0.5*(d.At(i, j)+d.At(j, i)))
		}
	}
}

// blockSpan is the union [l, h) of the row spans of rows r0..r1-1 (l >= h
// when they are all zero).
func blockSpan(lo, hi []int, r0, r1 int) (l, h int) {
	l, h = math.MaxInt, 0
	for r := r0; r < r1; r++ {
		if hi[r] > lo[r] {
			l, h = min(l, lo[r]), max(h, hi[r])
		}
	}
	return l, h
}

// MulFactors returns B C, exploiting short row spans of C (tree, banded and
// stamped encoders) or a Toeplitz C (the FFT encoder, a slice of a
// circulant).
func MulFactors(b, c *mat.Dense) *mat.Dense {
	n, _ := b.Dims()
	m, nc := c.Dims()
	lo, hi, total := RowSpans(c)
	if !spanWorthIt(float64(n)*float64(total), float64(n)*float64(m)*float64(nc)) {
		if out := MulToeplitz(b, c); out != nil {
			return out
		}
		var out mat.Dense
		out.Mul(b, c)
		return &out
	}
	out := mat.NewDense(n, nc, nil)
	// Consecutive rows of C with the same span (the blocks of a stamped
	// encoder) go through one GEMM; short groups (tree nodes) through axpy.
	var blk mat.Dense
	for r0 := 0; r0 < m; {
		r1 := r0 + 1
		for r1 < m && lo[r1] == lo[r0] && hi[r1] == hi[r0] {
			r1++
		}
		l, h := lo[r0], hi[r0]
		switch {
		case h == l:
		case r1-r0 >= 16:
			blk.Reset()
			blk.Mul(b.Slice(0, n, r0, r1), c.Slice(r0, r1, l, h))
			for i := 0; i < n; i++ {
				floats.Add(out.RawRowView(i)[l:h], blk.RawRowView(i))
			}
		default:
			for i := 0; i < n; i++ {
				brow := b.RawRowView(i)
				orow := out.RawRowView(i)[l:h]
				for r := r0; r < r1; r++ {
					if bir := brow[r]; bir != 0 {
						floats.AddScaled(orow, bir, c.RawRowView(r)[l:h])
					}
				}
			}
		}
		r0 = r1
	}
	return out
}

// MulToeplitz returns B C by FFT correlation when C (m x n) is Toeplitz
// (C[i,j] depends only on i-j) and large enough to gain, else nil. Row i of
// B C is (B C)[i,j] = sum_q B[i,q] g(q-j), O(m log m) per row instead of
// O(m n).
func MulToeplitz(b, c *mat.Dense) *mat.Dense {
	m, n := c.Dims()
	if n < 64 {
		return nil
	}
	for i := 1; i < m; i++ {
		cur, prev := c.RawRowView(i), c.RawRowView(i-1)
		for j := 1; j < n; j++ {
			if cur[j] != prev[j-1] {
				return nil
			}
		}
	}
	// gg[u] = g(u - (n-1)) for u in [0, m+n-2], g(k) = C[i,j] with i-j = k.
	gg := make([]float64, m+n-1)
	for j := 0; j < n; j++ {
		gg[n-1-j] = c.At(0, j)
	}
	for i := 1; i < m; i++ {
		gg[n-1+i] = c.At(i, 0)
	}
	size := 1
	for size < m+n-1 {
		size *= 2
	}
	ft := fourier.NewFFT(size)
	pad := make([]float64, size)
	copy(pad, gg)
	gSpec := ft.Coefficients(nil, pad)
	coef := make([]complex128, size/2+1)
	conv := make([]float64, size)
	rows, _ := b.Dims()
	out := mat.NewDense(rows, n, nil)
	for i := 0; i < rows; i++ {
		// (B C)[i,j] = (reverse(b) * gg)[m-1 + n-1-j]: a linear convolution;
		// size >= m+n-1 keeps the wrapped terms out of the needed indices.
		clear(pad)
		brow := b.RawRowView(i)
		for q, v := range brow {
			pad[m-1-q] = v
		}
		ft.Coefficients(coef, pad)
		for k := range coef {
			coef[k] *= gSpec[k]
		}
		ft.Sequence(conv, coef)
		orow := out.RawRowView(i)
		for j := range orow {
			orow[j] = conv[(m-1+n-1-j)%size] / float64(size)
		}
	}
	return out
}

// frobSq is ||B||_F^2.
func frobSq(b *mat.Dense) float64 {
	r, _ := b.Dims()
	s := 0.0
	for i := 0; i < r; i++ {
		for _, v := range b.RawRowView(i) {
			s += v * v
		}
	}
	return s
}

// prefixDiff returns A S^-1: column j is A[:,j] - A[:,j+1]. It turns a
// prefix-sum decoder B_S into the post-processed decoder A S^-1 B_S of a
// general workload A (SPEC 2).
func prefixDiff(a *mat.Dense) *mat.Dense {
	n, _ := a.Dims()
	out := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		ar, or := a.RawRowView(i), out.RawRowView(i)
		for j := 0; j < n; j++ {
			or[j] = ar[j]
			if j+1 < n {
				or[j] -= ar[j+1]
			}
		}
	}
	return out
}

// PostProcess returns A S^-1 B_S, or B_S itself for the prefix-sum workload.
func PostProcess(w dpcore.Workload, bs *mat.Dense) (*mat.Dense, error) {
	if w.Kind == dpcore.PrefixSumKind {
		return bs, nil
	}
	a, err := w.Matrix()
	if err != nil {
		return nil, err
	}
	var b mat.Dense
	b.Mul(prefixDiff(a), bs)
	return &b, nil
}

// CumulativeRows returns S P: row i is the sum of rows 0..i of P.
func CumulativeRows(p *mat.Dense) *mat.Dense {
	r, c := p.Dims()
	out := mat.NewDense(r, c, nil)
	for i := 0; i < r; i++ {
		or := out.RawRowView(i)
		copy(or, p.RawRowView(i))
		if i > 0 {
			prev := out.RawRowView(i - 1)
			for j := range or {
				or[j] += prev[j]
			}
		}
	}
	return out
}

// ApplyWorkload returns A P, using prefix sums when A = S.
func ApplyWorkload(w dpcore.Workload, p *mat.Dense) (*mat.Dense, error) {
	if w.Kind == dpcore.PrefixSumKind {
		return CumulativeRows(p), nil
	}
	a, err := w.Matrix()
	if err != nil {
		return nil, err
	}
	var b mat.Dense
	b.Mul(a, p)
	return &b, nil
}
