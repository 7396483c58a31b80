package mfnoise

import (
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// denseCirculant is circ(v): entry (i,j) = v[(i-j) mod len(v)].
func denseCirculant(v []float64) *mat.Dense {
	m := len(v)
	c := mat.NewDense(m, m, nil)
	for i := 0; i < m; i++ {
		for j := 0; j < m; j++ {
			c.Set(i, j, v[((i-j)%m+m)%m])
		}
	}
	return c
}

func TestFFTEncoderMatchesDenseCirculant(t *testing.T) {
	for _, n := range []int{1, 2, 5, 8, 13} {
		m := 2 * n
		w, _ := dpcore.PrefixSum(n)
		f, x, err := fftMechanism(w, FFTAlgorithm1)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		y, _, _ := fftGenerator(n)
		circY := denseCirculant(y)
		// circ(y)^2 must be circ(v), whose top-left block is S.
		v := make([]float64, m)
		for i := 0; i < n; i++ {
			v[i] = 1
		}
		var sq mat.Dense
		sq.Mul(circY, circY)
		if !mat.EqualApprox(&sq, denseCirculant(v), 1e-12) {
			t.Fatalf("n=%d: circ(y)^2 != circ(v)", n)
		}
		if !mat.EqualApprox(f.Encoder, circY.Slice(0, m, 0, n), 0) {
			t.Fatalf("n=%d: encoder is not circ(y)[:, :n]", n)
		}
		if !mat.EqualApprox(f.Decoder, circY.Slice(0, n, 0, m), 0) {
			t.Fatalf("n=%d: Algorithm-1 decoder is not circ(y)[:n, :]", n)
		}
		if !mat.EqualApprox(x, linalg.Gram(f.Encoder), 1e-12) {
			t.Fatalf("n=%d: Toeplitz Gram differs from C^T C", n)
		}
	}
}

func TestFFTOptimalDecoderIsPseudoinverse(t *testing.T) {
	mom, _ := dpcore.MomentumWorkload(9, 0.95, dpcore.CooldownSchedule(9, 0.25, 0.05))
	for _, w := range []dpcore.Workload{{Kind: dpcore.PrefixSumKind, N: 1}, {Kind: dpcore.PrefixSumKind, N: 7}, {Kind: dpcore.PrefixSumKind, N: 32}, mom} {
		f, err := DenseFFT(w, FFTOptimal)
		if err != nil {
			t.Fatalf("%v: %v", w, err)
		}
		a, _ := w.Matrix()
		want, err := OptimalDecoder(a, f.Encoder)
		if err != nil {
			t.Fatal(err)
		}
		if !mat.EqualApprox(f.Decoder, want, 1e-9) {
			t.Fatalf("%v: FFT optimal decoder differs from A C^+", w)
		}
	}
	// Momentum with the Algorithm-1 decoder is A S^-1 B_F.
	f, err := DenseFFT(mom, FFTAlgorithm1)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := dpcore.PrefixSum(9)
	fs, _ := DenseFFT(s, FFTAlgorithm1)
	a, _ := mom.Matrix()
	sm, _ := s.Matrix()
	var sInv, want mat.Dense
	if err := sInv.Inverse(sm); err != nil {
		t.Fatal(err)
	}
	want.Product(a, &sInv, fs.Decoder)
	if !mat.EqualApprox(f.Decoder, &want, 1e-10) {
		t.Fatal("momentum FFT decoder is not A S^-1 B_F")
	}
}

func TestToeplitzInverse(t *testing.T) {
	col := []float64{4, -1, 0.5, 0.25, -0.1, 0.05}
	n := len(col)
	tm := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			tm.Set(i, j, col[abs(i-j)])
		}
	}
	g, err := toeplitzInverse(col)
	if err != nil {
		t.Fatal(err)
	}
	var want mat.Dense
	if err := want.Inverse(tm); err != nil {
		t.Fatal(err)
	}
	if !mat.EqualApprox(g, &want, 1e-13) {
		t.Fatalf("toeplitz inverse\n%v\nwant\n%v", mat.Formatted(g), mat.Formatted(&want))
	}
	if _, err := toeplitzInverse([]float64{1, 2}); err == nil {
		t.Fatal("indefinite Toeplitz matrix accepted")
	}
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

// Multi-epoch paper Cor. J.1: with kappa = 1 and rho = 1/2 (sigma = 1) the
// expected MSE of Algorithm 1 is (n + sum_{a<n} 1/sin(pi(2a+1)/(2n)))^2 / n^2
// for its complex-valued noise; the real factorization's Loss/n is a quarter.
func TestFFTClosedFormMSE(t *testing.T) {
	for _, n := range []int{1, 10, 100, 257} {
		w, _ := dpcore.PrefixSum(n)
		f, err := DenseFFT(w, FFTAlgorithm1)
		if err != nil {
			t.Fatal(err)
		}
		loss, err := f.Loss(dpcore.SingleParticipation())
		if err != nil {
			t.Fatal(err)
		}
		sum := float64(n)
		for a := 0; a < n; a++ {
			sum += 1 / math.Sin(math.Pi*float64(2*a+1)/float64(2*n))
		}
		corJ1 := sum * sum / float64(n*n)
		if got := loss / float64(n); math.Abs(got-corJ1/4) > 1e-10*corJ1 {
			t.Fatalf("n=%d: Loss/n = %v, Cor. J.1 / 4 = %v", n, got, corJ1/4)
		}
	}
}

func TestMulToeplitzMatchesDense(t *testing.T) {
	// A random Toeplitz 150 x 70 matrix times a random 9 x 150 one.
	m, n := 150, 70
	g := make([]float64, m+n-1)
	for i := range g {
		g[i] = math.Sin(float64(i * i)) // deterministic, irregular
	}
	c := mat.NewDense(m, n, nil)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			c.Set(i, j, g[i-j+n-1])
		}
	}
	b := mat.NewDense(9, m, nil)
	for i := 0; i < 9; i++ {
		for q := 0; q < m; q++ {
			b.Set(i, q, math.Cos(float64(3*i+q*q)))
		}
	}
	got := linalg.MulToeplitz(b, c)
	if got == nil {
		t.Fatal("Toeplitz matrix not detected")
	}
	var want mat.Dense
	want.Mul(b, c)
	if !mat.EqualApprox(got, &want, 1e-11) {
		t.Fatal("FFT product differs from dense product")
	}
	c.Set(5, 3, 0.5)
	if linalg.MulToeplitz(b, c) != nil {
		t.Fatal("non-Toeplitz matrix taken for Toeplitz")
	}
}

// The spectral bound from eigenvalues of X[pi,pi] equals the definition
// sqrt(k) max_j ||C[:,pi_j]||_2 computed by SVD of the column blocks. The
// encoder has a negative entry in every pattern block of X (C[i+8,i] =
// -0.5 makes X[i,i+8] = -0.5), so the exact nonnegative path does not apply.
func TestSpectralBoundMatchesSVD(t *testing.T) {
	w, _ := dpcore.PrefixSum(24)
	c := mat.NewDense(24, 24, nil)
	for i := 0; i < 24; i++ {
		c.Set(i, i, 1+0.1*float64(i%5))
		if i >= 8 {
			c.Set(i, i-8, -0.5)
		}
		if i >= 3 {
			c.Set(i, i-3, 0.25)
		}
	}
	a, _ := w.Matrix()
	b, err := OptimalDecoder(a, c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFactorization(w, c, b, Metadata{Kind: "test"})
	if err != nil {
		t.Fatal(err)
	}
	schema, _ := dpcore.KBParticipation(3, 8)
	got, err := f.Sensitivity(schema)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := f.Encoder.Dims()
	best := 0.0
	for _, p := range schema.Patterns(24) {
		sub := mat.NewDense(m, len(p), nil)
		for col, j := range p {
			for i := 0; i < m; i++ {
				sub.Set(i, col, f.Encoder.At(i, j))
			}
		}
		var svd mat.SVD
		if !svd.Factorize(sub, mat.SVDNone) {
			t.Fatal("SVD failed")
		}
		best = math.Max(best, svd.Values(nil)[0])
	}
	want := math.Sqrt(3) * best
	if got.Method != sensitivity.SpectralBound || got.Exact || math.Abs(got.Value-want) > 1e-12*want {
		t.Fatalf("spectral bound %+v, SVD definition %v", got, want)
	}
}
