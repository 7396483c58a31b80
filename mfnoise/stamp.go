package mfnoise

// Stamping (SPEC 5.7): a block factorization repeated on the diagonal,
// with the decoder a stamped mechanism uses. The Stamped mechanism is in
// mech_stamp.go.

import (
	"fmt"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"gonum.org/v1/gonum/mat"
)

// StampDecoder selects the decoder of a stamped mechanism.
type StampDecoder int

const (
	// StampOptimal is B = A (I_s (x) C)^+.
	StampOptimal StampDecoder = iota
	// StampRestartedOnline reuses the block decoder B_0 of a prefix-sum
	// mechanism on the diagonal and repeats its last row below it (multi-epoch
	// paper App. D.4; the "restarted" trees of Kairouz et al. 2021): prefix i
	// in block t is the sum of the completed blocks' total estimates (each
	// block's last decoder row, the completed root estimate for a tree) plus
	// the block decoder's estimate inside block t. A non-prefix workload A is
	// served by post-processing, A S^-1 B.
	StampRestartedOnline
)

// String names the decoder as stored in Metadata.Decoder.
func (d StampDecoder) String() string {
	switch d {
	case StampOptimal:
		return "optimal"
	case StampRestartedOnline:
		return "restarted"
	}
	return fmt.Sprintf("StampDecoder(%d)", int(d))
}

// Stamp repeats a mechanism built for n/s steps s times (multi-epoch paper
// App. D.4; SPEC 5.7): encoder I_s (x) C, block diagonal. build is called
// once with the workload over n/s steps: the prefix sum of n/s steps for a
// prefix-sum workload or for StampRestartedOnline, else w.WithN(n/s), which
// must itself be a valid workload. n must be divisible by stamps.
//
// Against the published numbers (multi-epoch paper Table 1, (k,b) =
// (20,100), n = 2000): optimal-decoder Honaker (n=400)x5 1.2e6, FFT optimal
// decoder (n=400)x5 1.1e6, FFT (n=400)x5 1.6e6 (StampRestartedOnline over
// FFTAlgorithm1) and online Honaker (n=200)x10 2.0e6 (StampRestartedOnline
// over TreeOnline with completion and zeroed virtual steps; 4.0e6 without
// completion). TestMultiEpochTable1 checks all twenty Honaker and FFT rows.
func Stamp(w dpcore.Workload, stamps int, build func(dpcore.Workload) (*Factorization, error), decoder StampDecoder) (*Factorization, error) {
	f, _, err := stamp(w, stamps, func(w0 dpcore.Workload) (*Factorization, *mat.SymDense, error) {
		f, err := build(w0)
		return f, nil, err
	}, decoder)
	return f, err
}

// builder makes a factorization and optionally its Gram matrix C^T C (nil
// when it has no structure to exploit).
type builder func(dpcore.Workload) (*Factorization, *mat.SymDense, error)

func stamp(w dpcore.Workload, s int, build builder, decoder StampDecoder) (*Factorization, *mat.SymDense, error) {
	if err := w.Validate(); err != nil {
		return nil, nil, fmt.Errorf("mfnoise: stamp: %w", err)
	}
	n := w.N
	if s <= 0 {
		return nil, nil, guard.Invalidf("stamp: %d stamps, need at least 1", s)
	}
	if n%s != 0 {
		return nil, nil, guard.Invalidf("stamp: %d stamps do not divide n = %d steps", s, n)
	}
	if decoder != StampOptimal && decoder != StampRestartedOnline {
		return nil, nil, guard.Invalidf("stamp: unknown decoder %d", int(decoder))
	}
	n0 := n / s
	w0 := w.WithN(n0)
	if w.Kind == dpcore.PrefixSumKind || decoder == StampRestartedOnline {
		w0 = dpcore.Workload{Kind: dpcore.PrefixSumKind, N: n0}
	}
	if err := w0.Validate(); err != nil {
		return nil, nil, fmt.Errorf("mfnoise: stamp: block workload over %d steps: %w", n0, err)
	}
	f0, x0, err := build(w0)
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: stamp: block mechanism: %w", err)
	}
	if f0.N() != n0 {
		return nil, nil, fmt.Errorf("mfnoise: stamp: block mechanism has %d steps, want %d", f0.N(), n0)
	}
	c0 := f0.Encoder
	m0, _ := c0.Dims()
	if x0 == nil {
		x0 = linalg.Gram(c0)
	}
	c := mat.NewDense(s*m0, n, nil)
	x := mat.NewSymDense(n, nil)
	for t := 0; t < s; t++ {
		c.Slice(t*m0, (t+1)*m0, t*n0, (t+1)*n0).(*mat.Dense).Copy(c0)
		for i := 0; i < n0; i++ {
			for j := i; j < n0; j++ {
				x.SetSym(t*n0+i, t*n0+j, x0.At(i, j))
			}
		}
	}
	meta := f0.Meta
	meta.Stamps = s
	meta.CreatedAt = time.Time{}
	var b *mat.Dense
	switch decoder {
	case StampRestartedOnline:
		meta.Decoder = "restarted-" + f0.Meta.Decoder
		b, err = linalg.PostProcess(w, restartedDecoder(f0.Decoder, s))
	case StampOptimal:
		meta.Decoder = "optimal"
		b, err = stampedOptimalDecoder(w, c0, x0, s)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: stamp: %w", err)
	}
	f, err := NewFactorization(w, c, b, meta)
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: stamp: %w", err)
	}
	return f, x, nil
}

// restartedDecoder places the block decoder b0 (n0 x m0) on the diagonal
// and its last row in every block column left of the diagonal.
func restartedDecoder(b0 *mat.Dense, s int) *mat.Dense {
	n0, m0 := b0.Dims()
	b := mat.NewDense(s*n0, s*m0, nil)
	last := b0.RawRowView(n0 - 1)
	for t := 0; t < s; t++ {
		for i := 0; i < n0; i++ {
			row := b.RawRowView(t*n0 + i)
			for u := 0; u < t; u++ {
				copy(row[u*m0:(u+1)*m0], last)
			}
			copy(row[t*m0:(t+1)*m0], b0.RawRowView(i))
		}
	}
	return b
}

// stampedOptimalDecoder is A (I_s (x) C0)^+ = A (I_s (x) C0^+), with
// C0^+ = X0^-1 C0^T.
func stampedOptimalDecoder(w dpcore.Workload, c0 *mat.Dense, x0 *mat.SymDense, s int) (*mat.Dense, error) {
	m0, n0 := c0.Dims()
	var ch mat.Cholesky
	if !ch.Factorize(x0) {
		return nil, guard.Invalidf("block encoder does not have full column rank")
	}
	if cond := ch.Cond(); !(cond <= 1e14) {
		return nil, guard.Invalidf("block encoder is numerically rank deficient (cond(C^T C) = %.3g)", cond)
	}
	var pinv0 mat.Dense
	if err := ch.SolveTo(&pinv0, c0.T()); err != nil {
		return nil, err
	}
	if w.Kind == dpcore.PrefixSumKind {
		// S (I (x) C0^+) is the restarted construction over S0 C0^+.
		return restartedDecoder(linalg.CumulativeRows(&pinv0), s), nil
	}
	a, err := w.Matrix()
	if err != nil {
		return nil, err
	}
	n := w.N
	b := mat.NewDense(n, s*m0, nil)
	for t := 0; t < s; t++ {
		blk := b.Slice(0, n, t*m0, (t+1)*m0).(*mat.Dense)
		blk.Mul(a.Slice(0, n, t*n0, (t+1)*n0), &pinv0)
	}
	return b, nil
}
