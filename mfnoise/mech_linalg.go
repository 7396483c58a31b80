package mfnoise

import (
	"math"

	"gonum.org/v1/gonum/dsp/fourier"
	"gonum.org/v1/gonum/mat"
)

// sparseDensity is the fraction of nonzero entries below which gram and
// mulFactors use compressed rows instead of dense BLAS: tree encoders have
// about log2(n)/n nonzeros, banded ones bands/n.
const sparseDensity = 0.15

// csrRows lists the nonzero entries of each row of a, or returns nil when a
// is too dense for the sparse kernels to win.
func csrRows(a mat.Matrix) (cols [][]int, vals [][]float64) {
	m, n := a.Dims()
	nnz := 0
	limit := int(sparseDensity * float64(m) * float64(n))
	cols = make([][]int, m)
	vals = make([][]float64, m)
	raw, isDense := a.(*mat.Dense)
	for i := 0; i < m; i++ {
		var row []float64
		if isDense {
			row = raw.RawRowView(i)
		} else {
			row = mat.Row(nil, i, a)
		}
		for j, v := range row {
			if v != 0 {
				cols[i] = append(cols[i], j)
				vals[i] = append(vals[i], v)
				nnz++
			}
		}
		if nnz > limit {
			return nil, nil
		}
	}
	return cols, vals
}

// gram returns X = C^T C. Sparse encoders (trees, bands) are handled by
// accumulating the outer products of their rows; dense ones by one GEMM,
// which in gonum is several times faster than SymOuterK.
func gram(c mat.Matrix) *mat.SymDense {
	_, n := c.Dims()
	x := mat.NewSymDense(n, nil)
	if cols, vals := csrRows(c); cols != nil {
		raw := x.RawSymmetric()
		for r, cs := range cols {
			vs := vals[r]
			for a, i := range cs {
				vi := vs[a]
				row := raw.Data[i*raw.Stride:]
				for b := a; b < len(cs); b++ {
					row[cs[b]] += vi * vs[b]
				}
			}
		}
		return x
	}
	var d mat.Dense
	d.Mul(c.T(), c)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			x.SetSym(i, j, 0.5*(d.At(i, j)+d.At(j, i)))
		}
	}
	return x
}

// mulFactors returns B C, exploiting a sparse C (tree and banded encoders)
// or a Toeplitz C (the FFT encoder, a slice of a circulant).
func mulFactors(b, c *mat.Dense) *mat.Dense {
	n, _ := b.Dims()
	_, nc := c.Dims()
	cols, vals := csrRows(c)
	if cols == nil {
		if out := mulToeplitz(b, c); out != nil {
			return out
		}
		var out mat.Dense
		out.Mul(b, c)
		return &out
	}
	out := mat.NewDense(n, nc, nil)
	for i := 0; i < n; i++ {
		brow := b.RawRowView(i)
		orow := out.RawRowView(i)
		for r, bir := range brow {
			if bir == 0 {
				continue
			}
			vs := vals[r]
			for a, j := range cols[r] {
				orow[j] += bir * vs[a]
			}
		}
	}
	return out
}

// mulToeplitz returns B C by FFT correlation when C (m x n) is Toeplitz
// (C[i,j] depends only on i-j) and large enough to gain, else nil. Row i of
// B C is (B C)[i,j] = sum_q B[i,q] g(q-j), O(m log m) per row instead of
// O(m n).
func mulToeplitz(b, c *mat.Dense) *mat.Dense {
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

// postProcess returns A S^-1 B_S, or B_S itself for the prefix-sum workload.
func postProcess(w Workload, bs *mat.Dense) (*mat.Dense, error) {
	if w.Kind == PrefixSumKind {
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

// cumulativeRows returns S P: row i is the sum of rows 0..i of P.
func cumulativeRows(p *mat.Dense) *mat.Dense {
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

// applyWorkload returns A P, using prefix sums when A = S.
func applyWorkload(w Workload, p *mat.Dense) (*mat.Dense, error) {
	if w.Kind == PrefixSumKind {
		return cumulativeRows(p), nil
	}
	a, err := w.Matrix()
	if err != nil {
		return nil, err
	}
	var b mat.Dense
	b.Mul(a, p)
	return &b, nil
}

func finiteFloat(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
