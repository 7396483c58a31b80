package mfnoise

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// blockedBandEval holds the work of the blocked banded evaluation: the band
// Cholesky factor, L = U^T as a dense lower-triangular matrix (zero outside
// the band, written once), A^T, and W, which holds L^-1 A^T and then
// X^-1 A^T.
type blockedBandEval struct {
	band blas64.SymmetricBand
	l    []float64
	at   []float64
	w    []float64
	buf  []float64
	// inv holds the inverses of L's diagonal blocks (s x s each, zero
	// above the diagonal), tmp one block row of W.
	inv []float64
	tmp []float64
}

// minBandBlock is the smallest block of the blocked evaluation: narrower
// blocks leave the GEMMs too thin to run at level-3 speed.
const minBandBlock = 64

// bandBlock is the block size of the blocked evaluation for half bandwidth
// k: at least k, so that each block couples only with its neighbour.
func bandBlock(k int) int { return max(k, minBandBlock) }

// evalBlocked computes f = tr(A X^-1 A^T) and the gradient over the free
// band entries with level-3 BLAS on blocks of s >= bands - 1 rows: X = U^T U
// by band Cholesky (O(n bands^2)); W = U^-T A^T by blocked forward
// substitution, each block a GEMM with the k columns before it and a GEMM
// with the inverse of its own diagonal block; f = ||W||_F^2; Y = U^-1 W =
// X^-1 A^T by blocked back substitution; and only the band of Y Y^T, one
// s x (s + k) GEMM per block, gives the gradient -2 (Y Y^T)_ij. The cost is
// about 10 n^2 bands flops at GEMM speed instead of the dense 3.3 n^3.
// It returns false when X is not positive definite.
func (p *bandProblem) evalBlocked(g []float64) (float64, bool) {
	n, k := p.n, p.k
	s := bandBlock(k)
	d := p.blocked
	if d == nil {
		d = &blockedBandEval{
			band: blas64.SymmetricBand{Uplo: blas.Upper, N: n, K: k, Stride: k + 1, Data: make([]float64, n*(k+1))},
			l:    make([]float64, n*n),
			at:   make([]float64, n*n),
			w:    make([]float64, n*n),
			buf:  make([]float64, s*(s+k)),
			inv:  make([]float64, ((n+s-1)/s)*s*s),
			tmp:  make([]float64, s*n),
		}
		ar := p.a.RawMatrix()
		for i := 0; i < n; i++ {
			for j, v := range ar.Data[i*ar.Stride : i*ar.Stride+n] {
				d.at[j*n+i] = v
			}
		}
		p.blocked = d
	}
	raw := p.xb.RawSymBand()
	for i := 0; i < n; i++ {
		copy(d.band.Data[i*d.band.Stride:i*d.band.Stride+k+1], raw.Data[i*raw.Stride:i*raw.Stride+k+1])
	}
	if _, ok := lapack64.Pbtrf(d.band); !ok {
		return 0, false
	}
	for i := 0; i < n; i++ {
		row := d.band.Data[i*d.band.Stride:]
		for j := i; j <= min(i+k, n-1); j++ {
			d.l[j*n+i] = row[j-i]
		}
	}
	copy(d.w, d.at)
	gen := func(m []float64, r0, c0, rows, cols int) blas64.General {
		return blas64.General{Rows: rows, Cols: cols, Stride: n, Data: m[r0*n+c0:]}
	}
	// The diagonal blocks are inverted once (s^3/3 flops each), so that
	// every block solve is a GEMM: triangular solves with s x s blocks
	// and n right-hand sides ran at a fraction of GEMM speed.
	inv := func(i0 int) blas64.General {
		size := min(s, n-i0)
		return blas64.General{Rows: size, Cols: size, Stride: size, Data: d.inv[i0*s:]}
	}
	for i0 := 0; i0 < n; i0 += s {
		size := min(s, n-i0)
		blk := d.inv[i0*s : i0*s+size*size]
		for r := 0; r < size; r++ {
			copy(blk[r*size:r*size+size], d.l[(i0+r)*n+i0:(i0+r)*n+i0+size])
		}
		if ok := lapack64.Trtri(blas64.Triangular{Uplo: blas.Lower, Diag: blas.NonUnit, N: size, Stride: size, Data: blk}); !ok {
			return 0, false
		}
	}
	// solveBlock overwrites rows i0..i1 of W with inv(i0)^(T) times them.
	solveBlock := func(i0, i1 int, t blas.Transpose) {
		tmp := blas64.General{Rows: i1 - i0, Cols: n, Stride: n, Data: d.tmp}
		blas64.Gemm(t, blas.NoTrans, 1, inv(i0), gen(d.w, i0, 0, i1-i0, n), 0, tmp)
		copy(d.w[i0*n:i1*n], d.tmp[:(i1-i0)*n])
	}
	// Forward: L W = A^T, block by block.
	for i0 := 0; i0 < n; i0 += s {
		i1 := min(i0+s, n)
		if i0 > 0 {
			j0 := max(0, i0-k)
			blas64.Gemm(blas.NoTrans, blas.NoTrans, -1, gen(d.l, i0, j0, i1-i0, i0-j0), gen(d.w, j0, 0, i0-j0, n), 1, gen(d.w, i0, 0, i1-i0, n))
		}
		solveBlock(i0, i1, blas.NoTrans)
	}
	f := 0.0
	for _, v := range d.w {
		f += v * v
	}
	// Backward: L^T Y = W, last block first.
	for i0 := (n - 1) / s * s; i0 >= 0; i0 -= s {
		i1 := min(i0+s, n)
		if i1 < n {
			j1 := min(n, i1+k)
			blas64.Gemm(blas.Trans, blas.NoTrans, -1, gen(d.l, i1, i0, j1-i1, i1-i0), gen(d.w, i1, 0, j1-i1, n), 1, gen(d.w, i0, 0, i1-i0, n))
		}
		solveBlock(i0, i1, blas.Trans)
	}
	// Gradient: the band of Y Y^T, rows i0..i1 against rows i0..i1+k.
	base := make([]int, k+1)
	for off := 2; off <= k; off++ {
		base[off] = base[off-1] + n - (off - 1)
	}
	for i0 := 0; i0 < n; i0 += s {
		i1 := min(i0+s, n)
		j1 := min(n, i1+k)
		ld := j1 - i0
		c := blas64.General{Rows: i1 - i0, Cols: ld, Stride: ld, Data: d.buf}
		blas64.Gemm(blas.NoTrans, blas.Trans, 1, gen(d.w, i0, 0, i1-i0, n), gen(d.w, i0, 0, ld, n), 0, c)
		for r := i0; r < i1; r++ {
			row := d.buf[(r-i0)*ld:]
			for off := 1; off <= k && r+off < n; off++ {
				g[base[off]+r] = -2 * row[r+off-i0]
			}
		}
	}
	return f, true
}
