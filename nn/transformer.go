package nn

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Positions says how a Transformer encodes a token's position.
type Positions uint8

// Position encodings.
const (
	// LearnedPositions adds a learned vector per position (GPT-2's wpe,
	// BERT's position embeddings): Transformer.Wpe, Context x Dim.
	LearnedPositions Positions = iota
	// SinusoidalPositions adds the fixed encoding of Vaswani et al.
	// (2017): PE(t, 2k) = sin(t / 10000^(2k/Dim)), PE(t, 2k+1) = cos(...).
	SinusoidalPositions
)

func (p Positions) String() string {
	switch p {
	case LearnedPositions:
		return "learned"
	case SinusoidalPositions:
		return "sinusoidal"
	}
	return fmt.Sprintf("Positions(%d)", uint8(p))
}

// Linear is a weight (In x Out, row-major: y = x W + b, the layout of
// GPT-2's Conv1D) with a bias (Out entries, or none) and an optional
// low-rank adapter (Hu et al. 2021, LoRA): y += (Alpha/Rank) (x A) B with
// A In x Rank and B Rank x Out. LoRAA.Len == 0 means no adapter.
type Linear struct {
	Weight, Bias Param
	LoRAA, LoRAB Param
}

// Norm is a LayerNorm over one token's Dim features (Ba et al. 2016):
// y = Weight xhat + Bias, each Dim entries.
type Norm struct{ Weight, Bias Param }

// TransformerBlock is one block of a GPT-2 or BERT transformer: multi-head
// self-attention (Attn makes the queries, keys and values, Dim x 3 Dim,
// in that order along the output; Proj mixes the heads, Dim x Dim), then a
// GELU MLP (FC: Dim x Hidden, FC2: Hidden x Dim), each with a residual
// connection and a LayerNorm (before the sublayer in GPT-2, after the
// residual sum in BERT).
type TransformerBlock struct {
	Ln1, Ln2   Norm
	Attn, Proj Linear
	FC, FC2    Linear
}

// Transformer is a GPT-2- or BERT-shaped sequence model (Radford et al.
// 2019; Devlin et al. 2019) over token ids. One example is Context ids as
// float32, right-padded with -1: the first -1 ends the sequence (the
// padding mask), and nothing at or after it affects the example. Tokens
// are embedded (Wte, Vocab x Dim), positions added, then the blocks run
// and, with PreNorm, a final LayerNorm (Final; with post-norm, Final is the
// LayerNorm applied to the embeddings, as BERT's).
//
// Without Classes the model predicts the next token at every position
// with the output embedding tied to Wte (logits = h Wte^T; GPT-2's
// lm_head), or Head.Weight (Dim x Vocab) when untied; an example's loss
// is the mean cross-entropy of its predictions of tokens 1 .. L-1. With
// Classes, Head (Dim x Classes) reads the final state of the last token
// (causal models) or of the first (bidirectional ones) and the loss is the
// cross-entropy against the example's label.
//
// Attention is causal (each token sees those before it) when Causal is
// set, bidirectional otherwise; either way padding is never attended.
// The MLP's GELU is the tanh approximation GPT-2 uses unless ExactGELU.
//
// With FreezeBase only the low-rank adapters and a classification head
// are trained: the other parameters get no gradient (and no noise: their
// entries of a step's sum are zero).
type Transformer struct {
	Vocab, Context, Dim, Heads, Hidden int
	Causal, PostNorm                   bool
	Positions                          Positions
	ExactGELU                          bool
	// Eps is LayerNorm's epsilon (0 means 1e-5, GPT-2's).
	Eps float64
	// LoRAAlpha / LoRARank scales the adapters' output.
	LoRARank   int
	LoRAAlpha  float64
	FreezeBase bool
	Classes    int
	Wte, Wpe   Param
	Blocks     []TransformerBlock
	Final      Norm
	Head       Linear
}

func (t *Transformer) eps() float64 {
	if t.Eps == 0 {
		return 1e-5
	}
	return t.Eps
}

// Outputs is the length of one example's output: Context x Vocab logits
// for a language model, Classes for a classifier.
func (t *Transformer) Outputs() int {
	if t.Classes > 0 {
		return t.Classes
	}
	return t.Context * t.Vocab
}

// out makes a Transformer a Layer (a model's whole network) so that
// Network.Shapes checks it; it runs on a SeqPlan, not a Plan.
func (t Transformer) out(in Shape) (Shape, error) {
	if err := t.Check(); err != nil {
		return Shape{}, err
	}
	if in != (Shape{t.Context, 1, 1}) {
		return Shape{}, dpcore.Invalidf("transformer of context %d on a %dx%dx%d input", t.Context, in.C, in.H, in.W)
	}
	return Shape{t.Outputs(), 1, 1}, nil
}

// Check reports the first inconsistency of t's sizes and parameters.
func (t *Transformer) Check() error {
	if t.Vocab <= 0 || t.Context <= 0 || t.Dim <= 0 || t.Heads <= 0 || t.Hidden <= 0 || t.Classes < 0 {
		return dpcore.Invalidf("transformer: vocabulary %d, context %d, dimension %d, heads %d, hidden %d, classes %d",
			t.Vocab, t.Context, t.Dim, t.Heads, t.Hidden, t.Classes)
	}
	if t.Dim%t.Heads != 0 {
		return dpcore.Invalidf("transformer: %d heads do not divide dimension %d", t.Heads, t.Dim)
	}
	if len(t.Blocks) == 0 {
		return dpcore.Invalidf("transformer: no blocks")
	}
	if t.Positions > SinusoidalPositions {
		return dpcore.Invalidf("transformer: %v", t.Positions)
	}
	if t.Eps < 0 || t.Eps != t.Eps {
		return dpcore.Invalidf("transformer: eps %v", t.Eps)
	}
	if t.LoRARank < 0 || t.LoRARank > 0 && !(t.LoRAAlpha > 0) {
		return dpcore.Invalidf("transformer: LoRA rank %d, alpha %v", t.LoRARank, t.LoRAAlpha)
	}
	if t.Wte.Len != t.Vocab*t.Dim {
		return dpcore.Invalidf("transformer: token embedding %+v for %d x %d", t.Wte, t.Vocab, t.Dim)
	}
	wpe := 0
	if t.Positions == LearnedPositions {
		wpe = t.Context * t.Dim
	}
	if t.Wpe.Len != wpe {
		return dpcore.Invalidf("transformer: position embedding %+v, want %d entries", t.Wpe, wpe)
	}
	norm := func(n Norm, what string) error {
		if n.Weight.Len != t.Dim || n.Bias.Len != t.Dim {
			return dpcore.Invalidf("transformer: %s weight %+v, bias %+v for dimension %d", what, n.Weight, n.Bias, t.Dim)
		}
		return nil
	}
	lin := func(l Linear, in, out int, what string) error {
		if l.Weight.Len != in*out || l.Bias.Len != out && l.Bias.Len != 0 {
			return dpcore.Invalidf("transformer: %s weight %+v, bias %+v for %d x %d", what, l.Weight, l.Bias, in, out)
		}
		if l.LoRAA.Len == 0 && l.LoRAB.Len == 0 {
			return nil
		}
		if t.LoRARank == 0 || l.LoRAA.Len != in*t.LoRARank || l.LoRAB.Len != t.LoRARank*out {
			return dpcore.Invalidf("transformer: %s adapter %+v, %+v for %d x %d at rank %d", what, l.LoRAA, l.LoRAB, in, out, t.LoRARank)
		}
		return nil
	}
	if err := norm(t.Final, "final norm"); err != nil {
		return err
	}
	for i, b := range t.Blocks {
		for _, e := range []error{
			norm(b.Ln1, fmt.Sprintf("block %d ln_1", i)), norm(b.Ln2, fmt.Sprintf("block %d ln_2", i)),
			lin(b.Attn, t.Dim, 3*t.Dim, fmt.Sprintf("block %d attention", i)),
			lin(b.Proj, t.Dim, t.Dim, fmt.Sprintf("block %d attention projection", i)),
			lin(b.FC, t.Dim, t.Hidden, fmt.Sprintf("block %d mlp", i)),
			lin(b.FC2, t.Hidden, t.Dim, fmt.Sprintf("block %d mlp projection", i)),
		} {
			if e != nil {
				return e
			}
		}
	}
	switch {
	case t.Classes > 0:
		if err := lin(t.Head, t.Dim, t.Classes, "classification head"); err != nil {
			return err
		}
		if t.Head.Weight.Len == 0 {
			return dpcore.Invalidf("transformer: classification head without a weight")
		}
	case t.Head.Weight.Len != 0:
		if err := lin(t.Head, t.Dim, t.Vocab, "output head"); err != nil {
			return err
		}
	}
	return nil
}

// params lists every parameter range t uses.
func (t *Transformer) params() []Param {
	ps := []Param{t.Wte, t.Wpe, t.Final.Weight, t.Final.Bias, t.Head.Weight, t.Head.Bias, t.Head.LoRAA, t.Head.LoRAB}
	for _, b := range t.Blocks {
		ps = append(ps, b.Ln1.Weight, b.Ln1.Bias, b.Ln2.Weight, b.Ln2.Bias)
		for _, l := range []Linear{b.Attn, b.Proj, b.FC, b.FC2} {
			ps = append(ps, l.Weight, l.Bias, l.LoRAA, l.LoRAB)
		}
	}
	return ps
}

// MarshalText writes the encoding's name (model files record it so).
func (p Positions) MarshalText() ([]byte, error) {
	if p > SinusoidalPositions {
		return nil, dpcore.Invalidf("%v", p)
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads a name written by MarshalText.
func (p *Positions) UnmarshalText(b []byte) error {
	for c := LearnedPositions; c <= SinusoidalPositions; c++ {
		if string(b) == c.String() {
			*p = c
			return nil
		}
	}
	return dpcore.Invalidf("positions %q (want learned or sinusoidal)", b)
}
