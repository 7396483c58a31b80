package toeplitz

import (
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"gonum.org/v1/gonum/dsp/fourier"
)

// BLTParams is the generating function of a buffered linear Toeplitz (BLT)
// encoder with Nbuf = len(Theta) buffers: c_0 = 1 and c_t = sum_i Omega_i
// Theta_i^(t-1) for t >= 1, i.e. C(x) = 1 + sum_i Omega_i x / (1 - Theta_i
// x) (Dvijotham et al. 2024, Sec. 3; McMahan et al. 2024, Def. 2.1, there
// BLT(alpha, lambda) with alpha = Omega, lambda = Theta). C^-1 is a BLT with
// the same number of buffers (McMahan and Pillutla 2025, "An inversion
// theorem for buffered linear Toeplitz matrices"); the noise W = C^-1 Z is
// streamed from C itself: W_t = z_t - sum_i Omega_i s_{i,t}, s_{i,t+1} =
// Theta_i s_{i,t} + W_t, with Nbuf buffers s_i of d floats.
type BLTParams struct {
	Theta []float64 `json:"theta" msgpack:"theta"`
	Omega []float64 `json:"omega" msgpack:"omega"`
}

// NewBLT returns the BLT encoder over n steps. Every Theta_i must lie in
// [0, 1) (a decaying buffer) and every parameter be finite. n may exceed
// dpcore.StructuredStepLimit for streaming noise alone (a service with no fixed
// horizon); scoring it (Sensitivity, Loss) needs n <= dpcore.StructuredStepLimit,
// and StreamSensitivity covers every horizon at once.
func NewBLT(name string, n int, p BLTParams) (*Encoder, error) {
	if n <= 0 {
		return nil, guard.Invalidf("blt %s: n = %d steps must be positive", name, n)
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	q := BLTParams{Theta: append([]float64(nil), p.Theta...), Omega: append([]float64(nil), p.Omega...)}
	return &Encoder{Name: name, N: n, BLT: &q}, nil
}

func (p *BLTParams) validate() error {
	if len(p.Theta) == 0 || len(p.Theta) != len(p.Omega) {
		return guard.Invalidf("blt: %d decays and %d scales, need the same positive number", len(p.Theta), len(p.Omega))
	}
	for i := range p.Theta {
		if !(p.Theta[i] >= 0 && p.Theta[i] < 1) || !guard.Finite(p.Omega[i]) {
			return guard.Invalidf("blt: buffer %d has decay %v (need [0,1)) and scale %v", i, p.Theta[i], p.Omega[i])
		}
	}
	return nil
}

// Buffers is Nbuf.
func (p *BLTParams) Buffers() int { return len(p.Theta) }

// column returns c_0..c_{n-1}.
func (p *BLTParams) column(n int) []float64 {
	c := make([]float64, n)
	c[0] = 1
	pw := make([]float64, len(p.Theta))
	for i := range pw {
		pw[i] = 1
	}
	for t := 1; t < n; t++ {
		s := 0.0
		for i, th := range p.Theta {
			s += p.Omega[i] * pw[i]
			pw[i] *= th
		}
		c[t] = s
	}
	return c
}

// apply sets dst = C x: y_t = x_t + sum_i Omega_i s_{i,t},
// s_{i,t} = Theta_i s_{i,t-1} + x_{t-1}.
func (p *BLTParams) apply(dst, x []float64) {
	s := make([]float64, len(p.Theta))
	prev := 0.0
	for t := range x {
		y := x[t]
		for i, th := range p.Theta {
			if t > 0 {
				s[i] = th*s[i] + prev
			}
			y += p.Omega[i] * s[i]
		}
		prev = x[t]
		dst[t] = y
	}
}

// solve overwrites y with C^-1 y by the buffered recursion.
func (p *BLTParams) solve(y []float64) {
	s := make([]float64, len(p.Theta))
	for t := range y {
		w := y[t]
		for i := range s {
			w -= p.Omega[i] * s[i]
		}
		for i, th := range p.Theta {
			s[i] = th*s[i] + w
		}
		y[t] = w
	}
}

// convolveTrunc returns the first n coefficients of a * b by FFT.
func convolveTrunc(a, b []float64, n int) []float64 {
	la, lb := min(len(a), n), min(len(b), n)
	size := 1
	for size < la+lb-1 {
		size *= 2
	}
	ft := fourier.NewFFT(size)
	pa := make([]float64, size)
	copy(pa, a[:la])
	fa := ft.Coefficients(nil, pa)
	clear(pa)
	copy(pa, b[:lb])
	fb := ft.Coefficients(nil, pa)
	for k := range fa {
		fa[k] *= fb[k]
	}
	out := ft.Sequence(pa, fa)
	inv := 1 / float64(size)
	res := make([]float64, n)
	for i := range min(n, size) {
		res[i] = out[i] * inv
	}
	return res
}

// bltUnboundedSens2 is the packed-pattern sensitivity^2 of a BLT over an
// unbounded stream (k participations b apart, no horizon): the head t <
// T = (k-1) b + 1 summed directly, the tail in closed form. For t >= T every
// participation term is geometric: u_t = sum_i a_i Theta_i^(t-T) with a_i =
// Omega_i sum_{q<k} Theta_i^(T-1-q b), so sum_{t>=T} u_t^2 = sum_{i,j} a_i
// a_j / (1 - Theta_i Theta_j). With non-negative, non-increasing
// coefficients (checked by the caller) it is the exact sensitivity for every
// horizon at once: a stream with no fixed end keeps its guarantee.
func bltUnboundedSens2(p *BLTParams, k, b int) float64 {
	if k <= 1 {
		b = 1
		k = 1
	}
	T := (k-1)*b + 1
	c := p.column(T)
	head := packedSens2(c, k, b)
	nb := len(p.Theta)
	a := make([]float64, nb)
	for i, th := range p.Theta {
		s := 0.0
		for q := 0; q < k; q++ {
			s += math.Pow(th, float64(T-1-q*b))
		}
		a[i] = p.Omega[i] * s
	}
	tail := 0.0
	for i := range a {
		for j := range a {
			tail += a[i] * a[j] / (1 - p.Theta[i]*p.Theta[j])
		}
	}
	return head + tail
}

// StreamSensitivity is the sensitivity of a BLT encoder over an unbounded
// stream under single participation or (k,b)-min-sep participation: k
// participations at least b steps apart anywhere in a stream of any length.
// It bounds the sensitivity at every horizon, so a service that never stops
// keeps its guarantee. Exact (McMahan et al. 2024's min-sep theorem) when
// every Omega_i >= 0 and sum_i Omega_i <= 1 (then c_0 = 1 >= c_1 >= c_2 >=
// ... >= 0 at every t, which the parameters prove without looking at
// coefficients); other BLTs are refused.
func (t *Encoder) StreamSensitivity(schema dpcore.Schema) (dpcore.SensitivityResult, error) {
	if t.BLT == nil {
		return dpcore.SensitivityResult{}, guard.Invalidf("%s: stream sensitivity is defined for BLT encoders", t.Name)
	}
	if err := t.BLT.validate(); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	if err := schema.Check(); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	if schema.Kind == dpcore.KB {
		return dpcore.SensitivityResult{}, guard.Invalidf("%s: an unbounded stream has no (k,b)-participation; use min-sep", t.Name)
	}
	sum := 0.0
	for _, o := range t.BLT.Omega {
		if o < 0 {
			return dpcore.SensitivityResult{}, guard.Invalidf("%s: a negative scale %v: the coefficients are not provably non-increasing over an unbounded stream", t.Name, o)
		}
		sum += o
	}
	if sum > 1 {
		return dpcore.SensitivityResult{}, guard.Invalidf("%s: scales sum to %v > 1 = c_0: the coefficients are not non-increasing", t.Name, sum)
	}
	k, b := schema.K, schema.B
	if schema.Kind == dpcore.Single {
		k, b = 1, 1
	}
	if _, err := unboundedHorizon(k, b); err != nil {
		return dpcore.SensitivityResult{}, err
	}
	v := math.Sqrt(bltUnboundedSens2(t.BLT, k, b))
	if !guard.Finite(v) {
		return dpcore.SensitivityResult{}, guard.Invalidf("%s: stream sensitivity is %v", t.Name, v)
	}
	return dpcore.SensitivityResult{Value: v, Exact: true, Method: Packed}, nil
}
