package mfnoise

import (
	"context"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"gonum.org/v1/gonum/mat"
)

// Tree is the binary-tree mechanism (SPEC 5.2) with the online decoder
// (Honaker from below, with completion and zeroed virtual nodes:
// tree-online) or the optimal one (full Honaker: tree-full).
type Tree struct{ Decoder TreeDecoder }

func (m Tree) String() string {
	if m.Decoder == TreeFull {
		return "tree-full"
	}
	return "tree-online"
}

// Structure: a tall encoder, no bands.
func (Tree) Structure() Structure { return Structure{} }

// options are the tree options of the named mechanisms.
func (m Tree) options() TreeOptions {
	if m.Decoder == TreeFull {
		return TreeOptions{Decoder: TreeFull}
	}
	return TreeOptions{Decoder: TreeOnline, Completion: true, ZeroVirtual: true}
}

// Build is the dense factorization; tree-online for the prefix sum above
// dpcore.DenseStepLimit (steps up to dpcore.StructuredStepLimit) is scored from the
// tree's structure instead.
func (m Tree) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	if m.Decoder == TreeOnline && w.N > dpcore.DenseStepLimit && w.Kind == dpcore.PrefixSumKind {
		if err := guard.Steps(w.N); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return treeOnlineStrategy{n: w.N}, nil
	}
	return buildGram(ctx, m, w, schema, opt)
}

// BuildBlock builds the tree for w0 with its Gram matrix.
func (m Tree) BuildBlock(_ context.Context, w0 dpcore.Workload, _ dpcore.Schema, _ BuildOptions) (*Factorization, *mat.SymDense, error) {
	return binaryTree(w0, m.options())
}

// StampDecoder: the restarted online decoder keeps tree-online's
// streaming structure; tree-full is stamped with the optimal decoder.
func (m Tree) StampDecoder() StampDecoder {
	if m.Decoder == TreeFull {
		return StampOptimal
	}
	return StampRestartedOnline
}

// NoiseCost: one partial sum per tree level (plus the completed blocks'
// total when stamped) for tree-online; every row of one block's encoder
// for tree-full.
func (m Tree) NoiseCost(s dpcore.Strategy, stamps int) (float64, string) {
	n0, m0 := blockDims(s, stamps)
	if m.Decoder == TreeFull {
		return float64(m0), "O(n d)"
	}
	mem := float64(treeLevels(n0) + 1)
	if stamps > 1 {
		mem++
	}
	return mem, "O(d log n)"
}

// FFT is the FFT mechanism (multi-epoch paper Alg. 1) with the Algorithm-1
// decoder (fft) or the optimal one (fft-opt, App. K).
type FFT struct{ Decoder FFTDecoder }

func (m FFT) String() string {
	if m.Decoder == FFTOptimal {
		return "fft-opt"
	}
	return "fft"
}

// Structure: a tall encoder, no bands.
func (FFT) Structure() Structure { return Structure{} }

// Build is the dense factorization.
func (m FFT) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	return buildGram(ctx, m, w, schema, opt)
}

// BuildBlock builds the FFT mechanism for w0 with its Gram matrix.
func (m FFT) BuildBlock(_ context.Context, w0 dpcore.Workload, _ dpcore.Schema, _ BuildOptions) (*Factorization, *mat.SymDense, error) {
	return fftMechanism(w0, m.Decoder)
}

// StampDecoder: restarted for the Algorithm-1 decoder, optimal for fft-opt.
func (m FFT) StampDecoder() StampDecoder {
	if m.Decoder == FFTOptimal {
		return StampOptimal
	}
	return StampRestartedOnline
}

// NoiseCost: every row of one block's encoder.
func (m FFT) NoiseCost(s dpcore.Strategy, stamps int) (float64, string) {
	_, m0 := blockDims(s, stamps)
	if m.Decoder == FFTOptimal {
		return float64(m0), "O(d log^2 n)"
	}
	return float64(m0), "O(d log n)"
}
