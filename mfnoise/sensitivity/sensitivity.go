// Package sensitivity computes the L2 sensitivity of a dense encoder C
// under a participation schema (SPEC 3): exactly for single participation
// and for (k,b) participation with a nonnegative Gram matrix, by the
// min-separation dynamic program of banded-MF Thm 3, or as an upper bound.
package sensitivity

import (
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

const (
	// MaxColumnNorm: single participation, exact.
	MaxColumnNorm dpcore.SensitivityMethod = "max-column-norm"
	// NonnegativeGram: (k,b) with X = C^T C >= 0 on every pattern block
	// X[pi_j,pi_j], exact (multi-epoch paper Cor. 2.1, Eq. 3). Only those
	// blocks enter the sensitivity: a pattern's contribution is
	// sum_{i,l in pi} X_il <g_i, g_l> over unit-norm g, maximized by equal
	// g when the block is nonnegative. Columns that one example can join
	// together being orthogonal (the (k,b) optimum) is the case of
	// diagonal blocks.
	NonnegativeGram dpcore.SensitivityMethod = "nonnegative-gram"
	// SpectralBound: (k,b) with a negative entry in a pattern block; the
	// upper bound sqrt(k) max_j ||C[:,pi_j]||_2 (multi-epoch paper Thm 2.1).
	SpectralBound dpcore.SensitivityMethod = "spectral-bound"
	// MinSepDP: the O(nk) dynamic program of banded-MF Thm 3 / Algs. 3-5;
	// exact when X = C^T C vanishes at distance >= b (e.g. C lower
	// triangular and b-banded), an upper bound otherwise.
	MinSepDP dpcore.SensitivityMethod = "minsep-dp"
)

// Of returns the L2 sensitivity of the encoder C (m x n) under the
// schema (SPEC 3), whether it is exact, and which path computed it.
func Of(c mat.Matrix, schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	m, n := c.Dims()
	if err := schema.Validate(n); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	if m < n {
		return dpcore.SensitivityResult{}, invalidf("sensitivity: encoder is %d x %d, needs m >= n", m, n)
	}
	if err := guard.FiniteMatrix("encoder", c); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	if schema.Kind == dpcore.Single || schema.K == 1 {
		best := 0.0
		for j := 0; j < n; j++ {
			best = math.Max(best, floats.Norm(mat.Col(nil, j, c), 2))
		}
		return dpcore.SensitivityResult{Value: best, Exact: true, Method: MaxColumnNorm}, nil
	}
	return FromGram(c, linalg.Gram(c), schema)
}

// FromGram is Of for multiple participation given
// X = C^T C, so mechanisms with structure (trees, FFT, stamps) can supply X
// without a dense O(m n^2) product. The caller has validated c and s.
func FromGram(c mat.Matrix, x *mat.SymDense, schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	n := x.SymmetricDim()
	if schema.Kind == dpcore.Single || schema.K == 1 {
		best := 0.0
		for j := 0; j < n; j++ {
			best = math.Max(best, x.At(j, j))
		}
		return dpcore.SensitivityResult{Value: math.Sqrt(best), Exact: true, Method: MaxColumnNorm}, nil
	}
	if schema.Kind == dpcore.MinSep {
		v, exact := minSepSensitivitySquared(x, c, schema.K, schema.B)
		return dpcore.SensitivityResult{Value: math.Sqrt(v), Exact: exact, Method: MinSepDP}, nil
	}
	pats := schema.Patterns(n)
	if nonnegativeBlocks(x, pats) {
		best := 0.0
		for _, p := range pats {
			sum := 0.0
			for _, i := range p {
				for _, j := range p {
					sum += x.At(i, j)
				}
			}
			best = math.Max(best, sum)
		}
		return dpcore.SensitivityResult{Value: math.Sqrt(best), Exact: true, Method: NonnegativeGram}, nil
	}
	// ||C[:,pi]||_2^2 is the largest eigenvalue of X[pi,pi], a k x k
	// problem instead of an SVD of an m x k block.
	best := 0.0
	for _, p := range pats {
		sub := mat.NewSymDense(len(p), nil)
		for a, i := range p {
			for b := a; b < len(p); b++ {
				sub.SetSym(a, b, x.At(i, p[b]))
			}
		}
		var eig mat.EigenSym
		if !eig.Factorize(sub, false) {
			return dpcore.SensitivityResult{}, fmt.Errorf("mfnoise: sensitivity: eigendecomposition of a pattern block failed")
		}
		vals := eig.Values(nil)
		best = math.Max(best, vals[len(vals)-1])
	}
	return dpcore.SensitivityResult{Value: math.Sqrt(float64(schema.K) * best), Exact: false, Method: SpectralBound}, nil
}

// nonnegativeBlocks reports whether X[pi,pi] >= 0 for every pattern pi.
func nonnegativeBlocks(x *mat.SymDense, pats [][]int) bool {
	for _, p := range pats {
		for a, i := range p {
			for _, j := range p[a+1:] {
				// Round-off can make an exact zero slightly negative; 1e-12
				// relative is far below anything that moves a loss digit.
				if x.At(i, j) < -1e-12*math.Sqrt(x.At(i, i)*x.At(j, j)) {
					return false
				}
			}
		}
	}
	return true
}

// minSepSensitivitySquared bounds sens^2 <= max_pi sum_{i,j in pi} |X_ij| by
// VecSens(r), r_i = max over min-sep patterns containing i of
// sum_{j in pi} |X_ij| (banded-MF Algs. 3-5). It is exact when X_ij = 0
// whenever |i-j| >= b (true for lower-triangular b-banded C), because then
// only the diagonal of X counts on a min-sep pattern.
func minSepSensitivitySquared(x *mat.SymDense, c mat.Matrix, k, b int) (float64, bool) {
	n := x.SymmetricDim()
	r := make([]float64, n)
	raw := x.RawSymmetric()
	if gramBandwidth(x) <= b {
		// X_ij = 0 whenever |i-j| >= b: a min-sep pattern meets no
		// off-diagonal entry, so r_i = X_ii, the O(n^2 k) DP is moot and
		// the bound is attained (sens^2 = max_pi sum_{i in pi} X_ii).
		for i := range r {
			r[i] = math.Abs(raw.Data[i*raw.Stride+i])
		}
		return vecSens(r, k, b), true
	}
	u := make([]float64, n)
	sc := newVecSensScratch(n, k)
	for i := 0; i < n; i++ {
		// Row i of the symmetric X: the upper part is stored row-wise, the
		// lower part column-wise.
		for j := 0; j < i; j++ {
			u[j] = math.Abs(raw.Data[j*raw.Stride+i])
		}
		for j := i; j < n; j++ {
			u[j] = math.Abs(raw.Data[i*raw.Stride+j])
		}
		r[i] = sc.containing(u, i, k, b)
	}
	return vecSens(r, k, b), isLowerBanded(c, b)
}

// gramBandwidth is the least w with X_ij = 0 whenever |i-j| >= w.
func gramBandwidth(x *mat.SymDense) int {
	n := x.SymmetricDim()
	raw := x.RawSymmetric()
	w := 1
	for i := 0; i < n; i++ {
		row := raw.Data[i*raw.Stride : i*raw.Stride+n]
		for j := n - 1; j-i >= w; j-- {
			if row[j] != 0 {
				w = j - i + 1
				break
			}
		}
	}
	return w
}

// vecSensScratch holds the DP tables of vecSensContaining so the n calls of
// the min-sep bound allocate once (the DP is O(n k) per call, O(n^2 k) in
// all, and allocation dominated it at n = 2000).
type vecSensScratch struct {
	pre, suf [][]float64
	rev      []float64
}

func newVecSensScratch(n, k int) *vecSensScratch {
	sc := &vecSensScratch{pre: make([][]float64, k), suf: make([][]float64, k), rev: make([]float64, n)}
	for c := range sc.pre {
		sc.pre[c] = make([]float64, n)
		sc.suf[c] = make([]float64, n)
	}
	return sc
}

// prefixBestInto is prefixBest writing into the k+1 rows of pre.
func prefixBestInto(pre [][]float64, v []float64, k, b int) {
	clear(pre[0][:len(v)])
	for c := 1; c <= k; c++ {
		prev, cur := pre[c-1][:len(v)], pre[c][:len(v)]
		best := 0.0
		for j, vj := range v {
			take := vj
			if j >= b {
				take += prev[j-b]
			}
			// v >= 0, so the running max starting at 0 is the best of at
			// most c entries.
			if take > best {
				best = take
			}
			cur[j] = best
		}
	}
}

// containing is vecSensContaining without allocation: the best pattern
// containing i combines a pattern in v[0..i-b] with one in v[i+b..n-1], so
// the DP tables run only over those two ranges.
func (sc *vecSensScratch) containing(v []float64, i, k, b int) float64 {
	n := len(v)
	left, right := v[:max(i-b+1, 0)], v[min(i+b, n):]
	prefixBestInto(sc.pre, left, k-1, b)
	rev := sc.rev[:len(right)]
	for j, x := range right {
		rev[len(right)-1-j] = x
	}
	prefixBestInto(sc.suf, rev, k-1, b)
	best := 0.0
	for c1 := 0; c1 <= k-1; c1++ {
		l := 0.0
		if len(left) > 0 {
			l = sc.pre[c1][len(left)-1]
		}
		for c2 := 0; c1+c2 <= k-1; c2++ {
			r := 0.0
			if len(right) > 0 {
				r = sc.suf[c2][len(right)-1]
			}
			best = math.Max(best, l+r)
		}
	}
	return v[i] + best
}

// vecSens is max over patterns pi with |pi| <= k and gaps >= b of
// sum_{i in pi} v_i, for v >= 0, in O(nk).
func vecSens(v []float64, k, b int) float64 {
	pre := prefixBest(v, k, b)
	return pre[k][len(v)-1]
}

// prefixBest[c][j] is the best sum of at most c entries of v[0..j] with gaps
// >= b (for v >= 0 "at most c" and "exactly c" coincide in the max).
func prefixBest(v []float64, k, b int) [][]float64 {
	n := len(v)
	pre := make([][]float64, k+1)
	pre[0] = make([]float64, n)
	for c := 1; c <= k; c++ {
		pre[c] = make([]float64, n)
		for j := 0; j < n; j++ {
			take := v[j]
			if j-b >= 0 {
				take += pre[c-1][j-b]
			}
			best := take
			if j > 0 {
				best = math.Max(best, pre[c][j-1])
			}
			pre[c][j] = best
		}
	}
	return pre
}

// isLowerBanded reports whether the square matrix c is lower triangular with
// c[i,j] = 0 whenever i - j >= b.
func isLowerBanded(c mat.Matrix, b int) bool {
	m, n := c.Dims()
	if m != n {
		return false
	}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if (j > i || i-j >= b) && c.At(i, j) != 0 {
				return false
			}
		}
	}
	return true
}

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("mfnoise/sensitivity", format, args...)
}

// OfBanded is Of for a square lower-triangular encoder with the given
// number of bands, from its squared column norms alone (O(n k)): under
// single participation, and under (k,b) or (k,b)-min-separation
// participation with b >= bands, no two columns one example joins overlap,
// so X = C^T C is diagonal on every pattern and the sensitivity is exact
// (the max over patterns of sum_{i in pi} ||C[:,i]||^2; banded-MF Thm 2).
// With more bands than b it returns an error: that needs the dense Gram.
func OfBanded(colNorms2 []float64, bands int, schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	n := len(colNorms2)
	if err := schema.Validate(n); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	for j, v := range colNorms2 {
		if !(v >= 0) || math.IsInf(v, 0) {
			return dpcore.SensitivityResult{}, invalidf("sensitivity: column %d has squared norm %v", j+1, v)
		}
	}
	if schema.Kind == dpcore.Single || schema.K == 1 {
		best := 0.0
		for _, v := range colNorms2 {
			best = math.Max(best, v)
		}
		return dpcore.SensitivityResult{Value: math.Sqrt(best), Exact: true, Method: MaxColumnNorm}, nil
	}
	if bands > schema.B {
		return dpcore.SensitivityResult{}, invalidf("sensitivity: %d bands under %s (b = %d) needs the dense Gram matrix of the encoder", bands, schema, schema.B)
	}
	if schema.Kind == dpcore.MinSep {
		return dpcore.SensitivityResult{Value: math.Sqrt(vecSens(colNorms2, schema.K, schema.B)), Exact: true, Method: MinSepDP}, nil
	}
	best := 0.0
	for _, p := range schema.Patterns(n) {
		sum := 0.0
		for _, i := range p {
			sum += colNorms2[i]
		}
		best = math.Max(best, sum)
	}
	return dpcore.SensitivityResult{Value: math.Sqrt(best), Exact: true, Method: NonnegativeGram}, nil
}
