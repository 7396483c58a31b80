package mfnoise

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
	"gonum.org/v1/gonum/mat"
)

// DenseDPSGD is independent noise as a dense factorization: C = I, B = A (SPEC 5.1).
func DenseDPSGD(w dpcore.Workload) (*Factorization, error) {
	f, _, err := dpsgd(w)
	return f, err
}

func dpsgd(w dpcore.Workload) (*Factorization, *mat.SymDense, error) {
	a, err := w.Matrix()
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: dpsgd: %w", err)
	}
	n := w.N
	c := mat.NewDense(n, n, nil)
	x := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		c.Set(i, i, 1)
		x.SetSym(i, i, 1)
	}
	f, err := NewFactorization(w, c, a, Metadata{Kind: "dpsgd", Decoder: "workload"})
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: dpsgd: %w", err)
	}
	return f, x, nil
}

// DPSGD is the DP-SGD mechanism, independent noise C = I (Abadi et al.
// 2016). Its strategy is the Toeplitz encoder c = (1), streamed in O(d)
// memory at any n; BuildBlock is the dense C = I, B = A for stamping.
type DPSGD struct{}

func (DPSGD) String() string { return "dpsgd" }

// Structure: independent and 1-banded.
func (DPSGD) Structure() Structure { return Structure{Independent: true, Bands: 1} }

// Build is the Toeplitz strategy c = (1) for w.
func (DPSGD) Build(ctx context.Context, w dpcore.Workload, _ dpcore.Schema, _ BuildOptions) (dpcore.Strategy, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mfnoise: build dpsgd: %w", err)
	}
	t, err := toeplitz.New("dpsgd", w.N, []float64{1})
	if err != nil {
		return nil, err
	}
	return t.For(w)
}

// BuildBlock is the dense C = I for w0, with its Gram matrix I.
func (DPSGD) BuildBlock(_ context.Context, w0 dpcore.Workload, _ dpcore.Schema, _ BuildOptions) (*Factorization, *mat.SymDense, error) {
	return dpsgd(w0)
}

// StampDecoder: the optimal decoder.
func (DPSGD) StampDecoder() StampDecoder { return StampOptimal }

// NoiseCost: one i.i.d. d-vector per step.
func (DPSGD) NoiseCost(dpcore.Strategy, int) (float64, string) { return 1, "O(d)" }
