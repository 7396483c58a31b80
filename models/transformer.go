package models

import (
	"fmt"
	"math"
	"slices"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// TransformerConfig describes a GPT-2- or BERT-shaped transformer
// (nn.Transformer) for Builder.Transformer and the model file.
type TransformerConfig struct {
	Vocab   int `msgpack:"vocab" json:"vocab"`
	Context int `msgpack:"context" json:"context"`
	Dim     int `msgpack:"dim" json:"dim"`
	Heads   int `msgpack:"heads" json:"heads"`
	// Hidden is the MLP's width (0 means 4 Dim).
	Hidden int `msgpack:"hidden,omitempty" json:"hidden,omitempty"`
	Blocks int `msgpack:"blocks" json:"blocks"`
	// Causal attention (GPT-2) or bidirectional (BERT); PostNorm puts the
	// LayerNorms after the residual sums (BERT) instead of before the
	// sublayers (GPT-2).
	Causal    bool         `msgpack:"causal,omitempty" json:"causal,omitempty"`
	PostNorm  bool         `msgpack:"post_norm,omitempty" json:"post_norm,omitempty"`
	Positions nn.Positions `msgpack:"positions,omitempty" json:"positions,omitempty"`
	ExactGELU bool         `msgpack:"exact_gelu,omitempty" json:"exact_gelu,omitempty"`
	Eps       float64      `msgpack:"eps,omitempty" json:"eps,omitempty"`
	// Untied gives the language model its own output matrix (lm_head)
	// instead of the token embedding's transpose.
	Untied bool `msgpack:"untied,omitempty" json:"untied,omitempty"`
	// Classes > 0 makes a sequence classifier (head "score").
	Classes int `msgpack:"classes,omitempty" json:"classes,omitempty"`
	// LoRA: rank, alpha and the weight matrices that get adapters, by
	// their GPT-2 names: "attn.c_attn", "attn.c_proj", "mlp.c_fc",
	// "mlp.c_proj" (none listed with a rank means "attn.c_attn").
	LoRARank    int      `msgpack:"lora_rank,omitempty" json:"lora_rank,omitempty"`
	LoRAAlpha   float64  `msgpack:"lora_alpha,omitempty" json:"lora_alpha,omitempty"`
	LoRATargets []string `msgpack:"lora_targets,omitempty" json:"lora_targets,omitempty"`
	// FreezeBase trains only the adapters and a classification head.
	FreezeBase bool `msgpack:"freeze_base,omitempty" json:"freeze_base,omitempty"`
}

// LoRATargets lists the weight matrices of a block that can take
// adapters, in GPT-2's names.
func LoRATargets() []string { return []string{"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"} }

func (c TransformerConfig) hidden() int {
	if c.Hidden == 0 {
		return 4 * c.Dim
	}
	return c.Hidden
}

func (c TransformerConfig) check() error {
	for _, v := range []int{c.Vocab, c.Context, c.Dim, c.Heads, c.Blocks, c.hidden()} {
		if v <= 0 || v > maxSpecInt {
			return dpcore.Invalidf("transformer: vocabulary %d, context %d, dimension %d, heads %d, blocks %d, hidden %d", c.Vocab, c.Context, c.Dim, c.Heads, c.Blocks, c.Hidden)
		}
	}
	if c.Blocks > maxSpecLayers {
		return dpcore.Invalidf("transformer: %d blocks (at most %d)", c.Blocks, maxSpecLayers)
	}
	if c.Classes < 0 || c.Classes > maxSpecInt || c.LoRARank < 0 || c.LoRARank > maxSpecInt {
		return dpcore.Invalidf("transformer: classes %d, LoRA rank %d", c.Classes, c.LoRARank)
	}
	if c.Dim%c.Heads != 0 {
		return dpcore.Invalidf("transformer: %d heads do not divide dimension %d", c.Heads, c.Dim)
	}
	if c.LoRARank > 0 && !(c.LoRAAlpha > 0 && c.LoRAAlpha < math.Inf(1)) {
		return dpcore.Invalidf("transformer: LoRA alpha %v", c.LoRAAlpha)
	}
	for _, t := range c.LoRATargets {
		if !slices.Contains(LoRATargets(), t) {
			return dpcore.Invalidf("transformer: LoRA target %q (want one of %v)", t, LoRATargets())
		}
	}
	if len(c.LoRATargets) > 0 && c.LoRARank == 0 {
		return dpcore.Invalidf("transformer: LoRA targets %v without a rank", c.LoRATargets)
	}
	if c.FreezeBase && c.LoRARank == 0 && c.Classes == 0 {
		return dpcore.Invalidf("transformer: a frozen base without adapters or a classification head trains nothing")
	}
	if c.Untied && c.Classes > 0 {
		return dpcore.Invalidf("transformer: untied output embedding on a classifier")
	}
	return nil
}

func (c TransformerConfig) targets() []string {
	if c.LoRARank > 0 && len(c.LoRATargets) == 0 {
		return []string{"attn.c_attn"}
	}
	return c.LoRATargets
}

// Transformer adds a whole transformer (nn.Transformer) as the model's
// network; the input must be Context token ids ({Context, 1, 1}). The
// parameters take GPT-2's names: "wte/w", "wpe/w", "h.<i>.ln_1/w",
// "h.<i>.attn.c_attn/w" (Dim x 3 Dim, Conv1D's in x out layout), ...,
// "ln_f/w", so that ExportName gives Hugging Face's tensor names; adapters
// are "<matrix>/lora_A" (in x rank) and "<matrix>/lora_B" (rank x out),
// a classification head "score/w" (Dim x Classes) and "score/b", an
// untied output matrix "lm_head/w" (Dim x Vocab). Weights start as
// GPT-2's, normal-like with standard deviation 0.02 (uniform here), the
// adapters' B at zero (so an adapted model starts as its base), norms'
// scales at one.
func (b *Builder) Transformer(c TransformerConfig) *Builder {
	if b.root.err != nil {
		return b
	}
	if err := c.check(); err != nil {
		b.root.fail(err)
		return b
	}
	if b.shape != (nn.Shape{C: c.Context, H: 1, W: 1}) || len(b.layers) > 0 {
		b.root.fail(dpcore.Invalidf("transformer: it must be the only layer, on an input of %d token ids (not %dx%dx%d)", c.Context, b.shape.C, b.shape.H, b.shape.W))
		return b
	}
	const lim = 0.02 * 1.7320508075688772 // uniform with standard deviation 0.02
	D, H := c.Dim, c.hidden()
	t := nn.Transformer{Vocab: c.Vocab, Context: c.Context, Dim: D, Heads: c.Heads, Hidden: H,
		Causal: c.Causal, PostNorm: c.PostNorm, Positions: c.Positions, ExactGELU: c.ExactGELU, Eps: c.Eps,
		LoRARank: c.LoRARank, LoRAAlpha: c.LoRAAlpha, FreezeBase: c.FreezeBase, Classes: c.Classes}
	t.Wte = b.param("wte/w", []int{c.Vocab, D}, lim)
	if c.Positions == nn.LearnedPositions {
		t.Wpe = b.param("wpe/w", []int{c.Context, D}, lim/2)
	}
	norm := func(name string) nn.Norm {
		return nn.Norm{Weight: b.param(name+"/w", []int{D}, -1), Bias: b.param(name+"/b", []int{D}, 0)}
	}
	targets := c.targets()
	lin := func(name string, in, out int) nn.Linear {
		l := nn.Linear{Weight: b.param(name+"/w", []int{in, out}, lim), Bias: b.param(name+"/b", []int{out}, 0)}
		return l
	}
	adapt := func(l *nn.Linear, prefix, short string, in, out int) {
		if slices.Contains(targets, short) {
			l.LoRAA = b.param(prefix+short+"/lora_A", []int{in, c.LoRARank}, math.Sqrt(6/float64(in+c.LoRARank)))
			l.LoRAB = b.param(prefix+short+"/lora_B", []int{c.LoRARank, out}, 0)
		}
	}
	if c.PostNorm {
		t.Final = norm("ln_emb")
	}
	for i := range c.Blocks {
		p := fmt.Sprintf("h.%d.", i)
		var k nn.TransformerBlock
		k.Ln1 = norm(p + "ln_1")
		k.Attn = lin(p+"attn.c_attn", D, 3*D)
		adapt(&k.Attn, p, "attn.c_attn", D, 3*D)
		k.Proj = lin(p+"attn.c_proj", D, D)
		adapt(&k.Proj, p, "attn.c_proj", D, D)
		k.Ln2 = norm(p + "ln_2")
		k.FC = lin(p+"mlp.c_fc", D, H)
		adapt(&k.FC, p, "mlp.c_fc", D, H)
		k.FC2 = lin(p+"mlp.c_proj", H, D)
		adapt(&k.FC2, p, "mlp.c_proj", H, D)
		t.Blocks = append(t.Blocks, k)
	}
	if !c.PostNorm {
		t.Final = norm("ln_f")
	}
	switch {
	case c.Classes > 0:
		t.Head = nn.Linear{Weight: b.param("score/w", []int{D, c.Classes}, lim), Bias: b.param("score/b", []int{c.Classes}, 0)}
	case c.Untied:
		t.Head = nn.Linear{Weight: b.param("lm_head/w", []int{D, c.Vocab}, lim)}
	}
	b.flat = true
	cc := c
	cc.LoRATargets = slices.Clone(c.LoRATargets)
	return b.add(LayerSpec{Kind: TransformerLayer, Transformer: &cc}, "transformer", t)
}

// NewTransformer builds a transformer model called name.
func NewTransformer(name string, c TransformerConfig, seed uint64) (Model, error) {
	return NewBuilder(name, [3]int{c.Context, 1, 1}, seed).Transformer(c).Model()
}

// TransformerOf returns the transformer that is m's whole network, for
// nn.NewSeqPlan, and its configuration; ok is false for other models.
func TransformerOf(m Model) (t nn.Transformer, c TransformerConfig, ok bool) {
	s, isSeq := m.(*seq)
	if !isSeq || len(s.layers) != 1 || len(s.spec) != 1 || s.spec[0].Transformer == nil {
		return nn.Transformer{}, TransformerConfig{}, false
	}
	t, ok = s.layers[0].(nn.Transformer)
	return t, *s.spec[0].Transformer, ok
}

// MergeLoRA returns m with every adapter merged into its weight,
// W + (alpha/rank) A B, as a model without adapters (and with its base
// no longer frozen), for export; a model without adapters is returned
// as it is.
func MergeLoRA(m Model) (Model, error) {
	t, c, ok := TransformerOf(m)
	if !ok || c.LoRARank == 0 {
		return m, nil
	}
	base := c
	base.LoRARank, base.LoRAAlpha, base.LoRATargets, base.FreezeBase = 0, 0, nil, false
	out, err := NewBuilder(m.Name(), m.InputShape(), 0).ZeroWeights().Transformer(base).Model()
	if err != nil {
		return nil, err
	}
	src, dst := m.Params(), out.Params()
	at := map[string]ParamInfo{}
	for _, p := range m.Layout() {
		at[p.Name] = p
	}
	for _, p := range out.Layout() {
		q, ok := at[p.Name]
		if !ok || q.Len != p.Len {
			return nil, dpcore.Invalid("models", "merge: parameter %s", p.Name)
		}
		copy(dst[p.Offset:p.Offset+p.Len], src[q.Offset:q.Offset+q.Len])
	}
	s := t.LoRAAlpha / float64(t.LoRARank)
	r := t.LoRARank
	for _, p := range out.Layout() {
		a, okA := at[p.Name[:len(p.Name)-2]+"/lora_A"]
		bb, okB := at[p.Name[:len(p.Name)-2]+"/lora_B"]
		if len(p.Name) < 2 || p.Name[len(p.Name)-2:] != "/w" || !okA || !okB {
			continue
		}
		in, o := p.Shape[0], p.Shape[1]
		A, B := src[a.Offset:a.Offset+a.Len], src[bb.Offset:bb.Offset+bb.Len]
		W := dst[p.Offset : p.Offset+p.Len]
		for i := range in {
			for j := range o {
				acc := 0.0
				for k := range r {
					acc += float64(A[i*r+k]) * float64(B[k*o+j])
				}
				W[i*o+j] = float32(float64(W[i*o+j]) + s*acc)
			}
		}
	}
	return out, nil
}
