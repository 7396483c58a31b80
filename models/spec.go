package models

import (
	"fmt"
	"slices"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// LayerKind is the type of a layer in a LayerSpec. Model files record it
// by name ("conv2d", "dense", ...).
type LayerKind uint8

// Layer kinds, one per Builder method that adds a layer.
const (
	Conv2DLayer LayerKind = iota + 1
	DenseLayer
	MaxPoolLayer
	AvgPoolLayer
	FlattenLayer
	GroupNormLayer
	LayerNormLayer
	EmbeddingLayer
	ResidualLayer
	DropoutLayer
	TransformerLayer
)

var layerKindNames = [...]string{
	Conv2DLayer: "conv2d", DenseLayer: "dense", MaxPoolLayer: "maxpool", AvgPoolLayer: "avgpool",
	FlattenLayer: "flatten", GroupNormLayer: "groupnorm", LayerNormLayer: "layernorm",
	EmbeddingLayer: "embedding", ResidualLayer: "residual", DropoutLayer: "dropout",
	TransformerLayer: "transformer",
}

func (k LayerKind) String() string {
	if k == 0 || int(k) >= len(layerKindNames) {
		return fmt.Sprintf("LayerKind(%d)", uint8(k))
	}
	return layerKindNames[k]
}

// MarshalText writes the kind's name.
func (k LayerKind) MarshalText() ([]byte, error) {
	if k == 0 || int(k) >= len(layerKindNames) {
		return nil, dpcore.Invalid("models", "%v", k)
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads a name written by MarshalText.
func (k *LayerKind) UnmarshalText(b []byte) error {
	for c := Conv2DLayer; int(c) < len(layerKindNames); c++ {
		if string(b) == layerKindNames[c] {
			*k = c
			return nil
		}
	}
	return dpcore.Invalid("models", "layer kind %q is not known to this build", b)
}

// LayerSpec describes one layer as a Builder added it: its kind, its name
// (the prefix of its parameters' names; empty for layers without
// parameters) and its hyper-parameters, the arguments of the Builder
// method of that kind. Fields a kind does not use are zero. Replaying a
// list of LayerSpecs on a Builder (Architecture.New) rebuilds the same
// network with the same parameter names and layout.
type LayerSpec struct {
	Kind LayerKind `msgpack:"kind" json:"kind"`
	Name string    `msgpack:"name,omitempty" json:"name,omitempty"`
	// Conv2D and Dense: output channels or units; Conv2D also the kernel
	// size, stride and zero padding.
	Out    int `msgpack:"out,omitempty" json:"out,omitempty"`
	Kernel int `msgpack:"kernel,omitempty" json:"kernel,omitempty"`
	Stride int `msgpack:"stride,omitempty" json:"stride,omitempty"`
	Pad    int `msgpack:"pad,omitempty" json:"pad,omitempty"`
	// Act follows Conv2D, Dense and GroupNorm.
	Act nn.Activation `msgpack:"act,omitempty" json:"act,omitempty"`
	// Size is the window (and stride) of MaxPool and AvgPool.
	Size int `msgpack:"size,omitempty" json:"size,omitempty"`
	// Groups is GroupNorm's number of channel groups.
	Groups int `msgpack:"groups,omitempty" json:"groups,omitempty"`
	// Rate and Seed are Dropout's.
	Rate float64 `msgpack:"rate,omitempty" json:"rate,omitempty"`
	Seed uint64  `msgpack:"seed,omitempty" json:"seed,omitempty"`
	// Embedding: the numeric columns passed through, the vocabulary and
	// dimension of each table, and the bag mode.
	Numeric int    `msgpack:"numeric,omitempty" json:"numeric,omitempty"`
	Vocab   []int  `msgpack:"vocab,omitempty" json:"vocab,omitempty"`
	Dims    []int  `msgpack:"dims,omitempty" json:"dims,omitempty"`
	Bag     nn.Bag `msgpack:"bag,omitempty" json:"bag,omitempty"`
	// Body and Shortcut are a Residual block's branches (an empty
	// Shortcut is the identity).
	Body     []LayerSpec `msgpack:"body,omitempty" json:"body,omitempty"`
	Shortcut []LayerSpec `msgpack:"shortcut,omitempty" json:"shortcut,omitempty"`
	// Transformer is a whole transformer's configuration.
	Transformer *TransformerConfig `msgpack:"transformer,omitempty" json:"transformer,omitempty"`
}

// ParamSpec is a named parameter tensor of an Architecture, in buffer
// order.
type ParamSpec struct {
	Name  string `msgpack:"name" json:"name"`
	Shape []int  `msgpack:"shape" json:"shape"`
}

// Architecture describes a model completely enough to rebuild it: its
// name, input shape and classes, the layers as the Builder added them, and
// the parameter tensors those layers make (names and shapes, in buffer
// order), which rebuilding checks.
type Architecture struct {
	Name    string `msgpack:"name" json:"name"`
	Input   [3]int `msgpack:"input" json:"input"` // (channels, height, width)
	Classes int    `msgpack:"classes" json:"classes"`
	// ZeroInit records Builder.ZeroWeights: New starts every parameter at
	// zero.
	ZeroInit bool        `msgpack:"zero_init,omitempty" json:"zero_init,omitempty"`
	Layers   []LayerSpec `msgpack:"layers" json:"layers"`
	Params   []ParamSpec `msgpack:"params" json:"params"`
}

// Architected is implemented by models that can describe themselves for a
// model file; every model of this package (all made by a Builder) does.
type Architected interface {
	Architecture() Architecture
}

// Architecture implements Architected.
func (m *seq) Architecture() Architecture {
	a := Architecture{Name: m.name, Input: m.in, Classes: m.classes, ZeroInit: m.zero,
		Layers: cloneSpecs(m.spec), Params: make([]ParamSpec, len(m.layout))}
	for i, p := range m.layout {
		a.Params[i] = ParamSpec{Name: p.Name, Shape: slices.Clone(p.Shape)}
	}
	return a
}

func cloneSpecs(ls []LayerSpec) []LayerSpec {
	if ls == nil {
		return nil
	}
	out := make([]LayerSpec, len(ls))
	for i, l := range ls {
		l.Vocab, l.Dims = slices.Clone(l.Vocab), slices.Clone(l.Dims)
		l.Body, l.Shortcut = cloneSpecs(l.Body), cloneSpecs(l.Shortcut)
		if l.Transformer != nil {
			c := *l.Transformer
			c.LoRATargets = slices.Clone(c.LoRATargets)
			l.Transformer = &c
		}
		out[i] = l
	}
	return out
}

// New builds a model of this architecture with freshly initialized
// parameters (seed as for NewBuilder): the layers are replayed on a
// Builder, so shapes are checked as when the model was first built, and
// the parameters they make must be a.Params (when a lists any) and the
// output a.Classes logits.
func (a Architecture) New(seed uint64) (Model, error) {
	return a.build(seed, false, maxBuilderParams)
}

// Limits on descriptions read from files, so that a corrupt (or hostile)
// one cannot overflow a size or ask for an absurd allocation.
const (
	maxSpecInt    = 1 << 24 // any hyper-parameter
	maxSpecLayers = 1 << 16 // layers, counting those inside blocks
	maxSpecDepth  = 64      // nesting of residual blocks
	maxSpecInput  = 1 << 26 // features of one example
)

// build replays a; zero skips the random initialization (Load overwrites
// the parameters) and limit bounds the parameters the layers may make.
func (a Architecture) build(seed uint64, zero bool, limit int) (Model, error) {
	size := 1.0
	for _, d := range a.Input {
		size *= float64(d)
	}
	if size > maxSpecInput {
		return nil, dpcore.Invalid("models", "%s: input shape %v has more than %d features", a.Name, a.Input, maxSpecInput)
	}
	b := NewBuilder(a.Name, a.Input, seed)
	b.root.zero = a.ZeroInit || zero
	b.root.limit = limit
	layers := 0
	b.replay(a.Layers, 0, &layers)
	m, err := b.Model()
	if err != nil {
		return nil, err
	}
	s := m.(*seq)
	s.zero = a.ZeroInit
	if s.classes != a.Classes {
		return nil, dpcore.Invalid("models", "%s: the layers end in %d logits, the architecture says %d classes", a.Name, s.classes, a.Classes)
	}
	if a.Params == nil {
		return s, nil
	}
	for i, p := range s.layout {
		if i >= len(a.Params) {
			return nil, dpcore.Invalid("models", "%s: the layers make %d parameter tensors, the architecture lists %d", a.Name, len(s.layout), len(a.Params))
		}
		if q := a.Params[i]; q.Name != p.Name || !slices.Equal(q.Shape, p.Shape) {
			return nil, dpcore.Invalid("models", "%s: parameter tensor %d is %s %v, the architecture lists %s %v", a.Name, i, p.Name, p.Shape, q.Name, q.Shape)
		}
	}
	if len(a.Params) != len(s.layout) {
		return nil, dpcore.Invalid("models", "%s: the layers make %d parameter tensors, the architecture lists %d", a.Name, len(s.layout), len(a.Params))
	}
	return s, nil
}

// replay adds the layers ls describes.
func (b *Builder) replay(ls []LayerSpec, depth int, count *int) {
	for i, l := range ls {
		if b.root.err != nil {
			return
		}
		if *count++; *count > maxSpecLayers {
			b.root.fail(dpcore.Invalidf("more than %d layers", maxSpecLayers))
			return
		}
		for _, v := range slices.Concat([]int{l.Out, l.Kernel, l.Stride, l.Pad, l.Size, l.Groups, l.Numeric, len(l.Vocab)}, l.Vocab, l.Dims) {
			if v < -maxSpecInt || v > maxSpecInt {
				b.root.fail(dpcore.Invalidf("layer %d (%v %q): hyper-parameter %d out of range", i, l.Kind, l.Name, v))
				return
			}
		}
		switch l.Kind {
		case Conv2DLayer:
			b.Conv2D(l.Name, l.Out, l.Kernel, l.Stride, l.Pad, l.Act)
		case DenseLayer:
			b.Dense(l.Name, l.Out, l.Act)
		case MaxPoolLayer:
			b.MaxPool(l.Size)
		case AvgPoolLayer:
			b.AvgPool(l.Size)
		case FlattenLayer:
			b.Flatten()
		case GroupNormLayer:
			b.GroupNormAct(l.Name, l.Groups, l.Act)
		case LayerNormLayer:
			b.LayerNorm(l.Name)
		case EmbeddingLayer:
			b.Embedding(l.Name, l.Numeric, l.Vocab, l.Dims, l.Bag)
		case DropoutLayer:
			b.dropout(l.Rate, l.Seed)
		case TransformerLayer:
			if l.Transformer == nil {
				b.root.fail(dpcore.Invalidf("layer %d: a transformer without its configuration", i))
				return
			}
			b.Transformer(*l.Transformer)
		case ResidualLayer:
			if depth >= maxSpecDepth {
				b.root.fail(dpcore.Invalidf("residual blocks nested more than %d deep", maxSpecDepth))
				return
			}
			var shortcut func(*Builder)
			if len(l.Shortcut) > 0 {
				shortcut = func(s *Builder) { s.replay(l.Shortcut, depth+1, count) }
			}
			b.Residual(func(r *Builder) { r.replay(l.Body, depth+1, count) }, shortcut)
		default:
			b.root.fail(dpcore.Invalidf("layer %d: kind %v", i, l.Kind))
		}
	}
}
