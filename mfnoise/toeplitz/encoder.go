// Package toeplitz is the Toeplitz family of correlated-noise encoders:
// lower-triangular Toeplitz encoders C described by their first column
// alone (the square root of the prefix sum, banded Toeplitz, the banded
// inverse square root, buffered linear Toeplitz), scored, applied and
// optimized in O(n) memory. An Encoder bound to the workload it decodes
// is a Strategy (a dpcore.Strategy); Optimize finds the banded or BLT
// encoder with the least error. Package mfnoise builds the family's
// mechanisms (sqrt, toeplitz:BANDS, blt:NBUF, bisr:BANDS) from it and
// package noise streams its noise with the encoder's own buffers; this
// package depends on neither.
//
// The mathematics follows docs/math.md (cited as "SPEC n"): the mechanism
// releases B (C X + Z) with decoder B = A C^-1 for the workload A.
package toeplitz

import (
	"math"
	"strconv"
	"sync"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// Encoder is a Toeplitz encoder: C is an n x n lower-triangular
// Toeplitz matrix, C[i,j] = c_{i-j}, described by its first column alone.
// The decoder is B = A C^-1 for the workload A. Everything a run needs
// (sensitivity, loss, per-step error, encoder and decoder products, the
// streamed gradient-space noise W = C^-1 Z) is computed from the
// coefficients in O(n) memory; no n x n matrix is formed except by
// Matrices, which exists for cross-checks and for the dense plan code at
// small n. Its methods are safe for concurrent use.
//
// The family covers:
//   - DP-SGD, c = (1) (SPEC 5.1);
//   - the Toeplitz square root of the prefix sum, c_j = binom(2j, j) / 4^j,
//     C^2 = S (Henzinger, Upadhyay and Upadhyay 2023, "Almost tight error
//     bounds on differentially private continual counting"; Fichtenberger,
//     Henzinger and Upadhyay 2023, "Constant matters: fine-grained error bound
//     on differentially private continual observation");
//   - banded Toeplitz encoders with optimized coefficients (McKenna 2024,
//     "Scaling up the banded matrix factorization mechanism"; Kalinin and
//     Lampert 2024, "Banded square root matrix factorization for
//     differentially private model training"), see Optimize;
//   - the banded inverse square root (BISR): C^-1 is the square root's
//     inverse (1 - x)^(1/2) cut to p bands, so the noise W = C^-1 Z mixes
//     only the last p noise rows (Kalinin et al. 2025, arXiv 2505.12128);
//   - buffered linear Toeplitz (BLT) encoders, c_0 = 1, c_t = sum_i
//     Omega_i Theta_i^(t-1) (Dvijotham, McMahan, Pillutla, Steinke and
//     Thakurta 2024, "Efficient and near-optimal noise generation for
//     streaming differential privacy"; McMahan, Xu and Zhang 2024, "A
//     hassle-free algorithm for private learning in practice: don't use tree
//     aggregation, use BLTs"), see Optimize.
type Encoder struct {
	// Name is the mechanism's canonical name, e.g. "sqrt" or "blt:4".
	Name string
	// N is the number of steps.
	N int
	// Coef is c_0..c_{p-1}, the first column of C; c_t = 0 for t >= p, so
	// C has p bands. Nil for a BLT, whose coefficients come from BLT.
	Coef []float64
	// BLT is the generating function of a BLT encoder (nil otherwise).
	BLT *BLTParams
	// InvCoef is g_0..g_{p-1}, the first column of a banded C^-1 (the
	// banded inverse square root; nil otherwise). C itself is then full.
	InvCoef []float64

	// The fields are read-only once the mechanism is in use: the inverse
	// column below is computed from them once.
	invOnce sync.Once
	inv     []float64 // first column of C^-1 (length N), built once on demand
}

// New returns the banded Toeplitz encoder with first column coef
// (len(coef) <= n bands) over n steps. c_0 must be non-zero and every
// coefficient finite.
func New(name string, n int, coef []float64) (*Encoder, error) {
	if err := guard.Steps(n); err != nil {
		return nil, err
	}
	if len(coef) == 0 || len(coef) > n {
		return nil, guard.Invalidf("toeplitz %s: %d coefficients for n = %d steps, need 1..n", name, len(coef), n)
	}
	for j, v := range coef {
		if !guard.Finite(v) {
			return nil, guard.Invalidf("toeplitz %s: coefficient %d is %v", name, j, v)
		}
	}
	if coef[0] == 0 {
		return nil, guard.Invalidf("toeplitz %s: c_0 = 0 makes the encoder singular", name)
	}
	return &Encoder{Name: name, N: n, Coef: append([]float64(nil), coef...)}, nil
}

// Sqrt is the Toeplitz square root of the prefix sum over n steps:
// c_j = binom(2j, j) / 4^j, the coefficients of (1 - x)^(-1/2), so C^2 = S
// and B = S C^-1 = C (Henzinger et al. 2023; Fichtenberger et al. 2023).
// Its coefficients are positive and decreasing, so C^T C >= 0 and its
// sensitivity is exact under single, (k,b) and min-sep participation.
func Sqrt(n int) (*Encoder, error) {
	if err := guard.Steps(n); err != nil {
		return nil, err
	}
	c := make([]float64, n)
	g := make([]float64, n) // (1 - x)^(1/2)
	c[0], g[0] = 1, 1
	for j := 1; j < n; j++ {
		c[j] = c[j-1] * (float64(j) - 0.5) / float64(j)
		g[j] = g[j-1] * (float64(j) - 1.5) / float64(j)
	}
	return &Encoder{Name: "sqrt", N: n, Coef: c, inv: g}, nil
}

// BandedInverseSqrt is the BISR mechanism with p bands over n steps: C^-1
// has the first p coefficients of (1 - x)^(1/2) (1, -1/2, -1/8, ...) and C
// is its full inverse, whose coefficients are positive and decreasing
// (checked by Sensitivity, which then is exact).
func BandedInverseSqrt(n, p int) (*Encoder, error) {
	if err := guard.Steps(n); err != nil {
		return nil, err
	}
	if p < 1 || p > n {
		return nil, guard.Invalidf("bisr: %d bands, need 1..n = %d", p, n)
	}
	g := make([]float64, p)
	g[0] = 1
	for j := 1; j < p; j++ {
		g[j] = g[j-1] * (float64(j) - 1.5) / float64(j)
	}
	return &Encoder{Name: "bisr:" + strconv.Itoa(p), N: n, InvCoef: g}, nil
}

// Validate refuses an Encoder not made by a constructor (no
// coefficients, c_0 = 0 or non-finite), which would otherwise score as a
// zero-sensitivity mechanism or fail deep inside.
func (t *Encoder) Validate() error {
	switch {
	case t == nil || t.N <= 0:
		return guard.Invalidf("toeplitz: empty mechanism")
	case t.BLT != nil:
		return t.BLT.validate()
	case t.InvCoef != nil:
		if t.InvCoef[0] == 0 || !guard.Finite(t.InvCoef[0]) || len(t.InvCoef) > t.N {
			return guard.Invalidf("toeplitz %s: singular or oversized inverse coefficients", t.Name)
		}
	case len(t.Coef) == 0 || len(t.Coef) > t.N || t.Coef[0] == 0 || !guard.Finite(t.Coef[0]):
		return guard.Invalidf("toeplitz %s: %d coefficients for n = %d (c_0 must be non-zero); build it with New", t.Name, len(t.Coef), t.N)
	}
	return nil
}

// NoiseMemoryPerCoord is the number of d-vectors streaming the noise
// touches, counted as CompareRow does (the output included): Nbuf + 1 for a
// BLT, p for p bands of C or of C^-1 (p - 1 stored rows), 1 for DP-SGD, n
// for the square root.
func (t *Encoder) NoiseMemoryPerCoord() int {
	if t.BLT != nil {
		return t.BLT.Buffers() + 1
	}
	if t.InvCoef != nil {
		return len(t.InvCoef)
	}
	return len(t.Coef)
}

// Bands is the number of non-zero diagonals of C (N for a BLT and a
// BISR).
func (t *Encoder) Bands() int {
	if t.BLT != nil || t.InvCoef != nil {
		return t.N
	}
	return len(t.Coef)
}

// Column returns c_0..c_{N-1}, the first column of C.
func (t *Encoder) Column() []float64 {
	if t.BLT != nil {
		return t.BLT.column(t.N)
	}
	if t.InvCoef != nil {
		return seriesInverse(t.InvCoef, t.N)
	}
	c := make([]float64, t.N)
	copy(c, t.Coef)
	return c
}

// InverseColumn returns the first column of C^-1 (C^-1 is lower-triangular
// Toeplitz too): O(n p) by forward substitution for p bands, O(n Nbuf) for
// a BLT.
func (t *Encoder) InverseColumn() []float64 {
	t.invOnce.Do(func() {
		if t.inv != nil {
			return // closed form (sqrt)
		}
		switch {
		case t.BLT != nil:
			e := make([]float64, t.N)
			e[0] = 1
			t.inv = e
			t.BLT.solve(t.inv)
		case t.InvCoef != nil:
			t.inv = make([]float64, t.N)
			copy(t.inv, t.InvCoef)
		default:
			t.inv = seriesInverse(t.Coef, t.N)
		}
	})
	return t.inv
}

// seriesInverse returns the first n coefficients of 1/c(x).
func seriesInverse(c []float64, n int) []float64 {
	g := make([]float64, n)
	g[0] = 1 / c[0]
	for t := 1; t < n; t++ {
		s := 0.0
		for j := 1; j <= min(t, len(c)-1); j++ {
			s += c[j] * g[t-j]
		}
		g[t] = -s * g[0]
	}
	return g
}

// ApplyEncoder sets dst = C x (len(x) = len(dst) = N) in O(N p) time, O(N
// Nbuf) for a BLT.
func (t *Encoder) ApplyEncoder(dst, x []float64) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if len(x) != t.N || len(dst) != t.N {
		return guard.Invalidf("toeplitz %s: vectors of length %d and %d, want n = %d", t.Name, len(dst), len(x), t.N)
	}
	if t.BLT != nil {
		t.BLT.apply(dst, x)
		return nil
	}
	if g := t.InvCoef; g != nil {
		// C x solves C^-1 y = x by banded forward substitution.
		y := make([]float64, t.N)
		for i := range y {
			v := x[i]
			for j := 1; j <= min(i, len(g)-1); j++ {
				v -= g[j] * y[i-j]
			}
			y[i] = v / g[0]
		}
		copy(dst, y)
		return nil
	}
	if len(t.Coef) > 64 {
		// Many coefficients (sqrt): a truncated FFT product.
		copy(dst, convolveTrunc(t.Coef, x, t.N))
		return nil
	}
	y := make([]float64, t.N)
	for i := range y {
		s := 0.0
		for j := 0; j <= min(i, len(t.Coef)-1); j++ {
			s += t.Coef[j] * x[i-j]
		}
		y[i] = s
	}
	copy(dst, y)
	return nil
}

// ApplyDecoder sets dst = B x = A C^-1 x for the workload w over N steps.
func (t *Encoder) ApplyDecoder(w dpcore.Workload, dst, x []float64) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if len(x) != t.N || len(dst) != t.N {
		return guard.Invalidf("toeplitz %s: vectors of length %d and %d, want n = %d", t.Name, len(dst), len(x), t.N)
	}
	if w.N != t.N {
		return guard.Invalidf("toeplitz %s: workload has %d steps, the mechanism %d", t.Name, w.N, t.N)
	}
	eta, err := workloadRates(w)
	if err != nil {
		return err
	}
	y := append([]float64(nil), x...)
	t.solveEncoder(y)
	applyWorkloadVec(w, eta, y)
	copy(dst, y)
	return nil
}

// solveEncoder overwrites y with C^-1 y.
func (t *Encoder) solveEncoder(y []float64) {
	switch {
	case t.BLT != nil:
		t.BLT.solve(y)
	case t.InvCoef != nil:
		// Banded C^-1: a convolution, in place from the end.
		g := t.InvCoef
		for i := len(y) - 1; i >= 0; i-- {
			v := 0.0
			for j := 0; j <= min(i, len(g)-1); j++ {
				v += g[j] * y[i-j]
			}
			y[i] = v
		}
	case len(t.Coef) <= 64:
		c := t.Coef
		inv0 := 1 / c[0]
		for i := range y {
			s := y[i]
			for j := 1; j <= min(i, len(c)-1); j++ {
				s -= c[j] * y[i-j]
			}
			y[i] = s * inv0
		}
	default:
		copy(y, convolveTrunc(t.InverseColumn(), y, t.N))
	}
}

// MaxGeneralWorkloadSteps bounds the O(n^2) decoder norms of a Toeplitz
// mechanism under a workload that is not Toeplitz (a learning-rate schedule
// that changes over time).
const MaxGeneralWorkloadSteps = 1 << 15

// DecoderRowNorms returns ||B[i,:]||^2 for every step i, B = A C^-1. For a
// Toeplitz workload (the prefix sum, or momentum with a constant rate) B is
// Toeplitz with first column b = A g (g the first column of C^-1) and the
// norms are prefix sums of b_k^2: O(n) after g. Other schedules cost O(n^2)
// time and are refused above MaxGeneralWorkloadSteps.
func (t *Encoder) DecoderRowNorms(w dpcore.Workload) ([]float64, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if w.N != t.N {
		return nil, guard.Invalidf("toeplitz %s: workload has %d steps, the mechanism %d", t.Name, w.N, t.N)
	}
	if err := guard.Steps(t.N); err != nil {
		return nil, err
	}
	eta, err := workloadRates(w)
	if err != nil {
		return nil, err
	}
	g := t.InverseColumn()
	n := t.N
	r := make([]float64, n)
	if eta == nil || constantRates(eta) {
		b := append([]float64(nil), g...)
		applyWorkloadVec(w, eta, b)
		acc := 0.0
		for i, v := range b {
			acc += v * v
			r[i] = acc
		}
		return r, nil
	}
	if n > MaxGeneralWorkloadSteps {
		return nil, guard.Invalidf("toeplitz %s: a time-varying learning-rate schedule makes B = A C^-1 non-Toeplitz and its norms cost O(n^2); n = %d exceeds the limit %d", t.Name, n, MaxGeneralWorkloadSteps)
	}
	// B[i,j] = sum_{l=j..i} eta_l h_{l-j}, h = M_beta-series * g.
	h := append([]float64(nil), g...)
	for i := 1; i < n; i++ {
		h[i] += w.Momentum * h[i-1]
	}
	for j := 0; j < n; j++ {
		acc := 0.0
		for i := j; i < n; i++ {
			acc += eta[i] * h[i-j]
			r[i] += acc * acc
		}
	}
	return r, nil
}

// Loss is sens^2(C) ||A C^-1||_F^2 under the schema (SPEC 4) with the
// sensitivity it used.
func (t *Encoder) Loss(w dpcore.Workload, schema dpcore.Schema) (float64, dpcore.SensitivityResult, error) {
	sens, err := t.Sensitivity(schema)
	if err != nil {
		return 0, dpcore.SensitivityResult{}, err
	}
	loss, err := t.LossAt(w, sens.Value)
	return loss, sens, err
}

// LossAt is sens^2 ||A C^-1||_F^2 for a sensitivity computed elsewhere
// (the per-participation sensitivity of amplified accounting, for one), in
// O(n) memory: dpcore.LossAt of the encoder bound to w.
func (t *Encoder) LossAt(w dpcore.Workload, sens float64) (float64, error) {
	return dpcore.LossAt(&Strategy{Encoder: t, Workload: w}, sens)
}

// Sensitivity methods of Toeplitz encoders.
const (
	// Packed: sens^2 = ||C 1_pi||^2 for the packed pattern pi =
	// {0, b, 2b, ...} (at most k steps), exact when every c_t >= 0 under
	// single and (k,b) participation (X = C^T C >= 0, multi-epoch paper
	// Cor. 2.1, and pi_0 dominates the other (k,b) patterns entrywise), and
	// under min-sep participation when moreover c_0 >= c_1 >= ... >= 0
	// (McMahan, Xu and Zhang 2024, the BLT min-sep sensitivity theorem:
	// the worst min-sep pattern participates as early and as often as
	// allowed).
	Packed dpcore.SensitivityMethod = "toeplitz-packed"
	// EnvelopeBound: coefficients of mixed sign (or increasing
	// ones under min-sep): the same formula for the envelope e_t =
	// max_{s >= t} |c_s| >= |c_t|, which is non-negative and
	// non-increasing. It bounds sens^2 from above: sens^2 <= max_pi
	// sum_{i,j in pi} |X_ij| (banded-MF Thm 3) <= max_pi ||E 1_pi||^2, E
	// the Toeplitz matrix of e, whose worst pattern is the packed one by
	// the theorem above.
	EnvelopeBound dpcore.SensitivityMethod = "toeplitz-envelope-bound"
)

// Sensitivity is sens(C) under the schema for clipping norm 1 in O(n) time
// (see Packed and EnvelopeBound). The conditions that make
// it exact are checked on the coefficients actually used.
func (t *Encoder) Sensitivity(schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	if err := t.Validate(); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	if err := guard.Steps(t.N); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	if err := schema.Validate(t.N); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	c := t.Column()
	k, b := schema.K, schema.B
	if schema.Kind == dpcore.Single || k == 1 {
		return dpcore.SensitivityResult{Value: math.Sqrt(floats.Dot(c, c)), Exact: true, Method: sensitivity.MaxColumnNorm}, nil
	}
	nonneg, nonincr := true, true
	for i, v := range c {
		if v < 0 {
			nonneg = false
		}
		if i > 0 && v > c[i-1] {
			nonincr = false
		}
	}
	exact := nonneg && (schema.Kind == dpcore.KB || nonincr)
	if !exact {
		e := make([]float64, len(c))
		run := 0.0
		for i := len(c) - 1; i >= 0; i-- {
			run = math.Max(run, math.Abs(c[i]))
			e[i] = run
		}
		if schema.Kind == dpcore.KB {
			// |c| suffices for (k,b): pi_0 dominates entrywise.
			for i, v := range c {
				e[i] = math.Abs(v)
			}
		}
		c = e
	}
	v := math.Sqrt(packedSens2(c, k, b))
	if !guard.Finite(v) {
		return dpcore.SensitivityResult{}, guard.Invalidf("toeplitz %s: sensitivity is %v", t.Name, v)
	}
	if exact {
		return dpcore.SensitivityResult{Value: v, Exact: true, Method: Packed}, nil
	}
	return dpcore.SensitivityResult{Value: v, Exact: false, Method: EnvelopeBound}, nil
}

// packedSens2 is ||C 1_pi||^2 for pi = {0, b, ..., (k-1) b} cut at n =
// len(c) (see packedComb).
func packedSens2(c []float64, k, b int) float64 {
	_, s := packedComb(c, k, b)
	return s
}

// Matrices returns the dense encoder C and decoder B = A C^-1 for the
// workload w, for cross-checks and the dense plan code; refused above
// dpcore.DenseStepLimit.
func (t *Encoder) Matrices(w dpcore.Workload) (encoder, decoder *mat.Dense, err error) {
	if err := t.Validate(); err != nil {
		return nil, nil, err
	}
	if w.N != t.N {
		return nil, nil, guard.Invalidf("toeplitz %s: workload has %d steps, the mechanism %d", t.Name, w.N, t.N)
	}
	if err := guard.Dense(t.Name, t.N, 4); err != nil {
		return nil, nil, err
	}
	eta, err := workloadRates(w)
	if err != nil {
		return nil, nil, err
	}
	n := t.N
	c := t.Column()
	g := t.InverseColumn()
	cm := mat.NewDense(n, n, nil)
	bm := mat.NewDense(n, n, nil)
	col := make([]float64, n)
	for j := 0; j < n; j++ {
		for i := j; i < n; i++ {
			cm.Set(i, j, c[i-j])
		}
		clear(col)
		copy(col[j:], g[:n-j])
		applyWorkloadVec(w, eta, col)
		for i := j; i < n; i++ {
			bm.Set(i, j, col[i])
		}
	}
	return cm, bm, nil
}
