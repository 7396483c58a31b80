package mfnoise

import (
	"fmt"
	"math"
	"math/cmplx"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"gonum.org/v1/gonum/dsp/fourier"
	"gonum.org/v1/gonum/mat"
)

// FFTDecoder selects the decoder of the FFT mechanism.
type FFTDecoder int

const (
	// FFTAlgorithm1 is B_F = circ(y)[:n,:], so that B_F C_F = S (multi-epoch
	// paper Alg. 1; O(n log n) noise), post-processed as A S^-1 B_F for a
	// non-prefix workload.
	FFTAlgorithm1 FFTDecoder = iota
	// FFTOptimal is B = A C_F^+ (multi-epoch paper App. K).
	FFTOptimal
)

// String names the decoder as stored in Metadata.Decoder.
func (d FFTDecoder) String() string {
	switch d {
	case FFTAlgorithm1:
		return "algorithm1"
	case FFTOptimal:
		return "optimal"
	}
	return fmt.Sprintf("FFTDecoder(%d)", int(d))
}

// fftSpectrum returns V = DFT(v) for v = (1 x n, 0 x n) in closed form
// (multi-epoch paper Eq. 44): V_0 = n, V_k = 0 for even k > 0 and
// 2 / (1 - exp(-i pi k / n)) for odd k. The exact zeros matter: a computed
// V_k of 1e-13 would have a square root of 3e-7.
func fftSpectrum(n int) []complex128 {
	m := 2 * n
	v := make([]complex128, m)
	v[0] = complex(float64(n), 0)
	for k := 1; k < m; k += 2 {
		v[k] = 2 / (1 - cmplx.Exp(complex(0, -math.Pi*float64(k)/float64(n))))
	}
	return v
}

// fftGenerator returns y (length 2n, real) with DFT(y) = sqrt(DFT(v)),
// principal branch (Lem. K.1), and the autocorrelation r of y
// (DFT(r) = |DFT(v)|), which gives C_F^T C_F[j,k] = r[|j-k|].
func fftGenerator(n int) (y, r []float64, spec []complex128) {
	m := 2 * n
	v := fftSpectrum(n)
	spec = make([]complex128, m)
	abs := make([]complex128, m)
	for k, vk := range v {
		spec[k] = cmplx.Sqrt(vk)
		abs[k] = complex(cmplx.Abs(vk), 0)
	}
	t := fourier.NewCmplxFFT(m)
	ys := t.Sequence(nil, spec)
	rs := t.Sequence(nil, abs)
	y = make([]float64, m)
	r = make([]float64, m)
	for i := range y {
		y[i] = real(ys[i]) / float64(m)
		r[i] = real(rs[i]) / float64(m)
	}
	return y, r, spec
}

// DenseFFT is the FFT mechanism of the multi-epoch paper (Sec. 4, App. C, J, K;
// SPEC 5.6): encoder C_F = circ(y)[:, :n] (2n x n) with DFT(y) = sqrt(DFT(v)),
// v = (1 x n, 0 x n), so circ(y)^2 = circ(v) has S as its top-left block.
// Its Gram matrix has negative entries. Under (k,b)-participation only the
// pattern blocks X[pi_j,pi_j] matter: where they are nonnegative the
// sensitivity is exact (e.g. n = 64, (4,16), or stamped at (20,100) with 5
// or more stamps), and otherwise it is the Thm 2.1 spectral bound (the
// paper's choice for every FFT row).
//
// Against the published numbers (multi-epoch paper Table 1, (k,b) =
// (20,100), n = 2000): FFT 2.3e6 and FFT optimal decoder 2.2e6. For single
// participation the Algorithm-1 MSE, Loss/n, is exactly a quarter of the
// paper's Cor. J.1 value (with rho = 1/2): that corollary accounts for Alg.
// 1's complex-valued noise, this factorization is its real-valued version.
func DenseFFT(w dpcore.Workload, decoder FFTDecoder) (*Factorization, error) {
	f, _, err := fftMechanism(w, decoder)
	return f, err
}

func fftMechanism(w dpcore.Workload, decoder FFTDecoder) (*Factorization, *mat.SymDense, error) {
	if err := w.Validate(); err != nil {
		return nil, nil, fmt.Errorf("mfnoise: fft: %w", err)
	}
	n := w.N
	m := 2 * n
	y, r, spec := fftGenerator(n)
	c := mat.NewDense(m, n, nil)
	for i := 0; i < m; i++ {
		row := c.RawRowView(i)
		for j := range row {
			row[j] = y[(i-j+m)%m]
		}
	}
	x := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			x.SetSym(i, j, r[j-i])
		}
	}
	var b *mat.Dense
	var err error
	switch decoder {
	case FFTAlgorithm1:
		bf := mat.NewDense(n, m, nil)
		for i := 0; i < n; i++ {
			row := bf.RawRowView(i)
			for j := range row {
				row[j] = y[(i-j+m)%m]
			}
		}
		b, err = linalg.PostProcess(w, bf)
	case FFTOptimal:
		b, err = fftOptimalDecoder(w, r[:n], spec)
	default:
		return nil, nil, guard.Invalidf("fft: unknown decoder %d", int(decoder))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: fft: %w", err)
	}
	f, err := NewFactorization(w, c, b, Metadata{Kind: "fft", Decoder: decoder.String()})
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: fft: %w", err)
	}
	return f, x, nil
}

// fftOptimalDecoder is B = A X^-1 C_F^T with X = C_F^T C_F the symmetric
// Toeplitz matrix with first column t. X^-1 comes from the Gohberg-Semencul
// structure in O(n^2), and each row of (A X^-1) C_F^T is a circular
// convolution with y, done by FFT: O(n^2 log n) instead of O(n^3).
func fftOptimalDecoder(w dpcore.Workload, t []float64, spec []complex128) (*mat.Dense, error) {
	n := len(t)
	m := 2 * n
	g, err := toeplitzInverse(t)
	if err != nil {
		return nil, err
	}
	p, err := linalg.ApplyWorkload(w, g)
	if err != nil {
		return nil, err
	}
	b := mat.NewDense(n, m, nil)
	ft := fourier.NewFFT(m)
	// Real DFT of y: spec restricted to the non-negative frequencies.
	yHalf := spec[:m/2+1]
	pad := make([]float64, m)
	coef := make([]complex128, m/2+1)
	for i := 0; i < n; i++ {
		copy(pad, p.RawRowView(i))
		clear(pad[n:])
		ft.Coefficients(coef, pad)
		for k := range coef {
			coef[k] *= yHalf[k]
		}
		row := b.RawRowView(i)
		ft.Sequence(row, coef)
		for j := range row {
			row[j] /= float64(m)
		}
	}
	return b, nil
}

// toeplitzInverse returns T^-1 for the symmetric positive definite Toeplitz
// matrix T with first column t: Levinson's recursion gives a = T^-1 e_1 in
// O(n^2), then the Gohberg-Semencul formula
// T^-1 = (L(a) L(a)^T - L(Z J a) L(Z J a)^T) / a_0 yields the entries by the
// recurrence G[i+1][j+1] = G[i][j] + (a_{i+1} a_{j+1} - a_{n-1-i} a_{n-1-j}) / a_0.
func toeplitzInverse(t []float64) (*mat.Dense, error) {
	n := len(t)
	if t[0] <= 0 || !guard.Finite(t[0]) {
		return nil, fmt.Errorf("mfnoise: toeplitz inverse: diagonal %v is not positive", t[0])
	}
	rr := make([]float64, n)
	for i := 1; i < n; i++ {
		rr[i-1] = t[i] / t[0]
	}
	e1 := make([]float64, n)
	e1[0] = 1
	a, err := levinson(rr[:max(n-1, 0)], e1)
	if err != nil {
		return nil, err
	}
	for i := range a {
		a[i] /= t[0]
	}
	g := mat.NewDense(n, n, nil)
	for j := 0; j < n; j++ {
		g.Set(0, j, a[j])
		g.Set(j, 0, a[j])
	}
	for i := 0; i+1 < n; i++ {
		for j := 0; j+1 < n; j++ {
			g.Set(i+1, j+1, g.At(i, j)+(a[i+1]*a[j+1]-a[n-1-i]*a[n-1-j])/a[0])
		}
	}
	return g, nil
}

// levinson solves T x = b for the symmetric positive definite Toeplitz T
// with unit diagonal and first column (1, r...) (Golub & Van Loan Alg.
// 4.7.2), in O(n^2).
func levinson(r, b []float64) ([]float64, error) {
	n := len(b)
	x := make([]float64, n)
	x[0] = b[0]
	if n == 1 {
		return x, nil
	}
	y := make([]float64, n)
	tmp := make([]float64, n)
	y[0] = -r[0]
	beta, alpha := 1.0, -r[0]
	for k := 1; k < n; k++ {
		beta *= 1 - alpha*alpha
		if !(beta > 0) {
			return nil, fmt.Errorf("mfnoise: levinson: Toeplitz matrix is not positive definite (step %d)", k)
		}
		s := b[k]
		for i := 0; i < k; i++ {
			s -= r[i] * x[k-1-i]
		}
		mu := s / beta
		for i := 0; i < k; i++ {
			tmp[i] = x[i] + mu*y[k-1-i]
		}
		copy(x[:k], tmp[:k])
		x[k] = mu
		if k < n-1 {
			s := -r[k]
			for i := 0; i < k; i++ {
				s -= r[i] * y[k-1-i]
			}
			alpha = s / beta
			for i := 0; i < k; i++ {
				tmp[i] = y[i] + alpha*y[k-1-i]
			}
			copy(y[:k], tmp[:k])
			y[k] = alpha
		}
	}
	return x, nil
}
