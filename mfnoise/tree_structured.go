package mfnoise

import (
	"math"
	"math/bits"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// The online binary tree (tree-online: estimator from below with
// completion and virtual-node zeroing) scored from its structure, so
// compare can rank it at n far above dpcore.DenseStepLimit without the (2N-1) x n
// encoder or the n x (2N-1) decoder. Prefix-sum workload only (the decoder
// of another workload is A S^-1 B_S, which has no such structure), and
// single or (k,b) participation (min-sep needs the O(n^2 k) DP bound on
// the dense Gram matrix).

// maxTreeWork bounds the O(k n) (k,b) sensitivity and the O((N-n) log^2 N)
// completion search of the structured tree.
const maxTreeWork = 1 << 31

// treeOnlineRowNorms returns ||B[i,:]||^2 of the online prefix decoder
// (BinaryTree with TreeOnline, Completion and ZeroVirtual) for i = 1..n.
// Prefix i is the sum of the dyadic subtrees of the binary expansion of i;
// in a subtree of height h the 2^j nodes j levels down have weight 2^-j /
// w_h, w_h = sum_{j<=h} 2^-j, so the subtree adds sum_j 2^j 2^-2j / w_h^2
// = 1 / w_h. Completion replaces the last row by the smallest padded
// prefix j in n..N, whose nodes covering only padded steps have weight 0.
func treeOnlineRowNorms(n int) ([]float64, error) {
	t := treeLevels(n)
	N := 1 << t
	if float64(N-n)*float64((t+1)*(t+1)) > maxTreeWork {
		return nil, guard.Invalidf("tree-online: n = %d: the completion search costs (N-n) log^2 N = %.3g operations, over %.3g", n, float64(N-n)*float64((t+1)*(t+1)), float64(maxTreeWork))
	}
	inv := make([]float64, t+1)
	for h := range inv {
		inv[h] = 1 / (2 - math.Ldexp(1, -h))
	}
	r := make([]float64, n)
	for i := 1; i <= n; i++ {
		v := 0.0
		for u := uint(i); u != 0; u &= u - 1 {
			v += inv[bits.TrailingZeros(u)]
		}
		r[i-1] = v
	}
	if n < N {
		best := r[n-1]
		for j := n + 1; j <= N; j++ {
			best = math.Min(best, paddedRowNorm(j, n, t))
		}
		r[n-1] = best
	}
	return r, nil
}

// paddedRowNorm is the squared norm of the online row of padded prefix j >
// n with the nodes whose first leaf is >= n zeroed.
func paddedRowNorm(j, n, t int) float64 {
	v := 0.0
	start := 0
	for h := t; h >= 0; h-- {
		if j&(1<<h) == 0 {
			continue
		}
		wsum := 2 - math.Ldexp(1, -h)
		for d := 0; d <= h; d++ {
			lvl := h - d
			// Nodes at level lvl in this subtree: positions q = start>>lvl
			// + 0..2^d-1; real when q << lvl < n.
			first := start >> lvl
			real := min(max((n+(1<<lvl)-1)>>lvl-first, 0), 1<<d)
			w := math.Ldexp(1, -d) / wsum
			v += float64(real) * w * w
		}
		start += 1 << h
	}
	return v
}

// treeLevels is L with 2^L >= n leaves.
func treeLevels(n int) int {
	L := 0
	for 1<<L < n {
		L++
	}
	return L
}

// treeSensitivity is the sensitivity of the tree encoder under single or
// (k,b) participation from its Gram matrix X_il = L + 1 - bitlen(i xor l)
// (the number of nodes covering both steps), which is non-negative: sens^2
// = max_j sum_{i,l in pi_j} X_il, exact (multi-epoch paper Cor. 2.1).
func treeSensitivity(n int, schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	if err := schema.Validate(n); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	L := treeLevels(n)
	if schema.Kind == dpcore.Single || schema.K == 1 {
		return dpcore.SensitivityResult{Value: math.Sqrt(float64(L + 1)), Exact: true, Method: sensitivity.MaxColumnNorm}, nil
	}
	if schema.Kind != dpcore.KB {
		return dpcore.SensitivityResult{}, guard.Invalidf("tree-online at n = %d: min-sep sensitivity needs the dense Gram matrix (limit n = %d)", n, dpcore.DenseStepLimit)
	}
	k, b := schema.K, min(schema.B, n)
	if float64(k)*float64(n) > maxTreeWork {
		return dpcore.SensitivityResult{}, guard.Invalidf("tree-online: (k,b) sensitivity costs k n = %.3g operations, over %.3g", float64(k)*float64(n), float64(maxTreeWork))
	}
	best := 0.0
	pat := make([]int, 0, k)
	for j := 0; j < b; j++ {
		pat = pat[:0]
		for i, c := j, 0; i < n && c < k; i, c = i+schema.B, c+1 {
			pat = append(pat, i)
		}
		sum := 0
		for a, i := range pat {
			sum += L + 1
			for _, l := range pat[a+1:] {
				sum += 2 * (L + 1 - bits.Len(uint(i^l)))
			}
		}
		best = math.Max(best, float64(sum))
	}
	return dpcore.SensitivityResult{Value: math.Sqrt(best), Exact: true, Method: sensitivity.NonnegativeGram}, nil
}

// treeOnlineStrategy is tree-online for the prefix sum above
// dpcore.DenseStepLimit: its sensitivity and decoder norms from the tree's
// structure, without matrices (its noise needs the dense encoder, which is
// refused at this size).
type treeOnlineStrategy struct{ n int }

func (t treeOnlineStrategy) Steps() int { return t.n }

func (t treeOnlineStrategy) Sensitivity(schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	return treeSensitivity(t.n, schema)
}

func (t treeOnlineStrategy) DecoderRowNorms() ([]float64, error) { return treeOnlineRowNorms(t.n) }

func (t treeOnlineStrategy) Matrices() (encoder, decoder *mat.Dense, err error) {
	return nil, nil, guard.Dense("tree-online", t.n, denseMatrices)
}
