package mfnoise

import (
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"gonum.org/v1/gonum/mat"
)

// Every path of gram and mulFactors (span axpy, span-group GEMM, Toeplitz
// FFT, dense GEMM) against plain dense products.
func TestGramAndProductPathsMatchDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	random := func(r, c int) *mat.Dense {
		d := mat.NewDense(r, c, nil)
		for i := 0; i < r; i++ {
			for j := 0; j < c; j++ {
				d.Set(i, j, rng.NormFloat64())
			}
		}
		return d
	}
	w100, _ := dpcore.PrefixSum(100)
	tree, _ := BinaryTree(w100, TreeOptions{Decoder: TreeFull})
	fft, _ := DenseFFT(w100, FFTAlgorithm1)
	var block mat.Dense // 5 stamps of a dense 40 x 20 block
	block.Kronecker(mat.NewDiagDense(5, []float64{1, 1, 1, 1, 1}), random(40, 20))
	banded := mat.NewDense(100, 100, nil)
	for i := 0; i < 100; i++ {
		for j := max(0, i-3); j <= i; j++ {
			banded.Set(i, j, rng.NormFloat64())
		}
	}
	lower := mat.NewDense(300, 300, nil)
	for i := 0; i < 300; i++ {
		for j := 0; j <= i; j++ {
			lower.Set(i, j, rng.NormFloat64())
		}
	}
	var bigBlock mat.Dense // row blocks with narrow column ranges: blocked GEMM
	bigBlock.Kronecker(mat.NewDiagDense(2, []float64{1, 1}), random(300, 150))
	for name, c := range map[string]*mat.Dense{"tree": tree.Encoder, "fft": fft.Encoder, "stamped": &block, "banded": banded, "dense": random(120, 100), "lower": lower, "big-stamped": &bigBlock} {
		m, n := c.Dims()
		var want mat.SymDense
		want.SymOuterK(1, c.T())
		if got := linalg.Gram(c); !mat.EqualApprox(got, &want, 1e-10) {
			t.Errorf("%s: gram differs from SymOuterK", name)
		}
		lo, hi, _ := linalg.RowSpans(c)
		for path, fill := range map[string]func(x *mat.SymDense){
			"spans":   func(x *mat.SymDense) { linalg.GramSpans(x, c, lo, hi) },
			"blocked": func(x *mat.SymDense) { linalg.GramBlocked(x, c, lo, hi, 16) },
			"dense":   func(x *mat.SymDense) { linalg.GramDense(x, c) },
		} {
			x := mat.NewSymDense(n, nil)
			fill(x)
			if !mat.EqualApprox(x, &want, 1e-10) {
				t.Errorf("%s: %s Gram differs from SymOuterK", name, path)
			}
		}
		b := random(n, m)
		var prod mat.Dense
		prod.Mul(b, c)
		if got := linalg.MulFactors(b, c); !mat.EqualApprox(got, &prod, 1e-10) {
			t.Errorf("%s: mulFactors differs from Mul", name)
		}
	}
}
