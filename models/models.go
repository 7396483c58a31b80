// Package models provides the image classifiers used for differentially
// private training: logistic regression, a multi-layer perceptron, the
// CIFAR-10 convolutional network of Kairouz et al. (2021), the small
// end-to-end CNN of Tramèr and Boneh (2021) and their linear ScatterNet
// over the fixed scattering transform (Scattering), over one flat float32 parameter buffer.
//
// Network returns a model's layer list (package nn), which the training
// engine (package clip) plans and executes. A model written in gorgonia is
// trained through package gorgoniadp instead.
//
// A layer's weight is stored row-major with shape (FanIn, FanOut) and its
// bias with shape (FanOut), both as contiguous ranges of the buffer returned
// by Params, so optimizers and noise generators write into one layout.
package models

import (
	"fmt"
	"io"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// ParamInfo describes one named parameter tensor inside the flat buffer.
type ParamInfo struct {
	Name   string
	Shape  []int
	Offset int // index of the first element in Params()
	Len    int // number of elements (product of Shape)
}

// Model is a classifier whose parameters live in one flat float32 buffer.
type Model interface {
	// Name is a short identifier such as "mlp" or "cifarcnn".
	Name() string
	// Params returns the flat parameter buffer itself, not a copy: writes
	// change the model.
	Params() []float32
	// NumParams is len(Params()).
	NumParams() int
	// Layout lists the parameter tensors in buffer order.
	Layout() []ParamInfo
	// InputShape is the (channels, height, width) of one example.
	InputShape() [3]int
	// Classes is the number of output classes.
	Classes() int
	// Save writes the architecture description and parameters.
	Save(w io.Writer) error
	// Load reads parameters written by Save of a model with the same
	// architecture.
	Load(r io.Reader) error
	// Network describes the same computation as a layer list for the
	// planned executor of package nn, which runs training steps.
	Network() nn.Network
}

// seq is the concrete type behind every model: a layer list over one
// flat parameter buffer.
type seq struct {
	name    string
	in      [3]int
	classes int
	layers  []nn.Layer
	layout  []ParamInfo
	params  []float32
	// spec describes the layers for the model file (Architecture); zero
	// records Builder.ZeroWeights.
	spec []LayerSpec
	zero bool
}

func (m *seq) Name() string        { return m.name }
func (m *seq) Params() []float32   { return m.params }
func (m *seq) NumParams() int      { return len(m.params) }
func (m *seq) InputShape() [3]int  { return m.in }
func (m *seq) Classes() int        { return m.classes }
func (m *seq) Layout() []ParamInfo { return cloneLayout(m.layout) }

func cloneLayout(l []ParamInfo) []ParamInfo {
	out := make([]ParamInfo, len(l))
	for i, p := range l {
		p.Shape = append([]int(nil), p.Shape...)
		out[i] = p
	}
	return out
}

func checkCommon(inputShape [3]int, classes int) error {
	for _, d := range inputShape {
		if d <= 0 {
			return dpcore.Invalidf("input shape %v", inputShape)
		}
	}
	if classes < 2 {
		return dpcore.Invalidf("classes %d < 2", classes)
	}
	return nil
}

// activation parses the activation of a version-1 model file.
func activation(act string) (nn.Activation, error) {
	switch act {
	case "tanh":
		return nn.Tanh, nil
	case "relu":
		return nn.ReLU, nil
	}
	return 0, dpcore.Invalidf("activation %q (want tanh or relu)", act)
}

// NewLogistic returns multinomial logistic regression on the flattened
// input. Its parameters start at zero (the loss is convex, so no random
// start is needed); seed is accepted for symmetry with the other
// constructors and unused.
func NewLogistic(inputShape [3]int, classes int, seed uint64) (Model, error) {
	if err := checkCommon(inputShape, classes); err != nil {
		return nil, fmt.Errorf("models: logistic: %w", err)
	}
	return NewBuilder("logistic", inputShape, seed).ZeroWeights().Dense("", classes, nn.Identity).Model()
}

// NewMLP returns a fully connected network with the given hidden widths and
// activation (nn.Tanh, nn.ReLU, ...), Glorot-uniform weights drawn from a
// generator seeded with seed, and zero biases.
func NewMLP(inputShape [3]int, hidden []int, classes int, a nn.Activation, seed uint64) (Model, error) {
	if err := checkCommon(inputShape, classes); err != nil {
		return nil, fmt.Errorf("models: mlp: %w", err)
	}
	if _, err := a.MarshalText(); err != nil {
		return nil, fmt.Errorf("models: mlp: %w", err)
	}
	b := NewBuilder("mlp", inputShape, seed)
	for _, h := range hidden {
		if h <= 0 {
			return nil, dpcore.Invalid("models", "mlp: hidden width %d", h)
		}
		b.Dense("", h, a)
	}
	return b.Dense("", classes, nn.Identity).Model()
}

// NewCIFARCNN returns the convolutional network of Kairouz et al. (2021,
// "Practical and private (deep) learning without sampling or shuffling"):
// three blocks of two 3x3 'same' convolutions (32, 64, 128 channels, tanh)
// each followed by 2x2 max pooling, then dense 128 (tanh) and dense classes.
// For 32x32 inputs the dense layer sees 4*4*128 = 2048 features, for 28x28
// inputs 3*3*128 = 1152.
func NewCIFARCNN(inputShape [3]int, classes int, seed uint64) (Model, error) {
	if err := checkCommon(inputShape, classes); err != nil {
		return nil, fmt.Errorf("models: cifarcnn: %w", err)
	}
	if inputShape[1] < 8 || inputShape[2] < 8 {
		return nil, dpcore.Invalid("models", "cifarcnn: input %v too small for three 2x2 pools", inputShape)
	}
	b := NewBuilder("cifarcnn", inputShape, seed)
	for _, out := range []int{32, 64, 128} {
		b.Conv2D("", out, 3, 1, 1, nn.Tanh).Conv2D("", out, 3, 1, 1, nn.Tanh).MaxPool(2)
	}
	return b.Dense("", 128, nn.Tanh).Dense("", classes, nn.Identity).Model()
}

// NewSmallCNN returns the end-to-end CNN of Tramèr and Boneh (2021,
// "Differentially private learning needs better features") for 28x28
// grayscale images, without its two 2x2 stride-1 max pools: an 8x8
// convolution with stride 2 and padding 2 to 16 channels (tanh), a 4x4
// convolution with stride 2 to 32 channels (tanh), dense 32 (tanh) and
// dense classes. For 28x28 inputs the maps are 13x13 and 5x5 and the
// model has 35,226 parameters (the published one, whose pools shrink the
// second map to 4x4, has 26,010). Its per-example gradient costs about
// 1/40 of the CIFAR network's (NewCIFARCNN) on 28x28 images.
func NewSmallCNN(inputShape [3]int, classes int, seed uint64) (Model, error) {
	if err := checkCommon(inputShape, classes); err != nil {
		return nil, fmt.Errorf("models: cnn-small: %w", err)
	}
	b := NewBuilder("cnn-small", inputShape, seed).
		Conv2D("", 16, 8, 2, 2, nn.Tanh).
		Conv2D("", 32, 4, 2, 0, nn.Tanh)
	return b.Dense("", 32, nn.Tanh).Dense("", classes, nn.Identity).Model()
}

func seedBytes(seed uint64) [32]byte {
	var b [32]byte
	for i := range 8 {
		b[i] = byte(seed >> (8 * i))
	}
	b[8] = 'm'
	return b
}

// NewTabular returns a classifier for tabular rows: numeric columns
// followed by one categorical column per entry of vocab (ids in
// [0, vocab[k]), -1 when missing), each embedded in dim dimensions, then
// a ReLU MLP with the given hidden widths. Inputs have shape
// (numeric + len(vocab), 1, 1).
func NewTabular(numeric int, vocab []int, dim int, hidden []int, classes int, seed uint64) (Model, error) {
	if numeric < 0 || len(vocab) == 0 || dim <= 0 {
		return nil, dpcore.Invalid("models", "tabular: %d numeric columns, %d categorical, dimension %d", numeric, len(vocab), dim)
	}
	in := [3]int{numeric + len(vocab), 1, 1}
	if err := checkCommon(in, classes); err != nil {
		return nil, fmt.Errorf("models: tabular: %w", err)
	}
	dims := make([]int, len(vocab))
	for k := range dims {
		dims[k] = dim
	}
	b := NewBuilder("tabular", in, seed).Embedding("embed", numeric, vocab, dims, nn.NoBag)
	for _, h := range hidden {
		b.Dense("", h, nn.ReLU)
	}
	return b.Dense("", classes, nn.Identity).Model()
}
