// Package models provides the image classifiers used for differentially
// private training: logistic regression, a multi-layer perceptron and the
// CIFAR-10 convolutional network of Kairouz et al. (2021), over one flat
// float32 parameter buffer.
//
// Each model describes itself twice, with the same parameters: Network
// returns the layer list (package nn) that the training engine (package
// clip) plans and executes, and Build adds the same computation to a
// gorgonia graph, for users who compose models with gorgonia. Every model
// is a stack of affine layers (dense, or 3x3 'same' convolutions); Build
// exposes each layer's input U (for a convolution the im2col-unfolded
// input, one row per output position) and pre-activation output Z.
//
// A layer's weight is stored row-major with shape (FanIn, FanOut) and its
// bias with shape (FanOut), both as contiguous ranges of the buffer returned
// by Params, so optimizers and noise generators write into one layout.
package models

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/dpmf-go/dpmf/nn"
	"gorgonia.org/gorgonia"
)

// ErrInvalid is returned (wrapped) for invalid model arguments.
var ErrInvalid = errors.New("invalid argument")

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
	// Build adds the forward computation for a batch of the given size to
	// g. The parameter nodes are backed by Params(), so the graph sees every
	// write to the buffer.
	Build(g *gorgonia.ExprGraph, batch int) (*Net, error)
	// Network describes the same computation as a layer list for the
	// planned executor of package nn, which runs training steps.
	Network() nn.Network
}

// Net is the forward graph of a model for a fixed batch size.
type Net struct {
	Batch  int
	Input  *gorgonia.Node // (Batch, C, H, W), float32
	Logits *gorgonia.Node // (Batch, Classes)
	Layers []Layer        // affine layers in forward order
}

// Layer is one affine layer Z = U W + b of a built graph.
type Layer struct {
	Name string
	Conv bool
	// Positions is the number of rows of U and Z per example: 1 for a
	// dense layer, the number of output pixels for a convolution.
	Positions int
	FanIn     int
	FanOut    int
	// In is U, shape (Batch*Positions, FanIn); rows of one example are
	// contiguous.
	In *gorgonia.Node
	// Out is the pre-activation Z, shape (Batch*Positions, FanOut).
	Out *gorgonia.Node
	// Probe is an all-zero input node added into Out. Gorgonia
	// differentiates only with respect to input nodes, so the gradient of
	// a loss with respect to Probe is its gradient with respect to Out.
	Probe *gorgonia.Node
	// Weight (FanIn, FanOut) and Bias (FanOut) locate the parameters.
	Weight, Bias ParamInfo
}

// layerSpec is one affine layer of an architecture.
type layerSpec struct {
	conv   bool
	fanIn  int // for conv: 9*Cin
	fanOut int
	act    string // "tanh", "relu" or "" (none, for the output layer)
	pool   bool   // conv only: 2x2 max pool after the activation
}

// seq is a sequential model: the concrete type behind every constructor.
type seq struct {
	name    string
	in      [3]int
	classes int
	hidden  []int
	act     string
	specs   []layerSpec
	layout  []ParamInfo
	params  []float32
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
			return fmt.Errorf("input shape %v: %w", inputShape, ErrInvalid)
		}
	}
	if classes < 2 {
		return fmt.Errorf("classes %d < 2: %w", classes, ErrInvalid)
	}
	return nil
}

// NewLogistic returns multinomial logistic regression on the flattened
// input. Its parameters start at zero (the loss is convex, so no random
// start is needed); seed is accepted for symmetry with the other
// constructors and unused.
func NewLogistic(inputShape [3]int, classes int, seed uint64) (Model, error) {
	if err := checkCommon(inputShape, classes); err != nil {
		return nil, fmt.Errorf("models: logistic: %w", err)
	}
	d := inputShape[0] * inputShape[1] * inputShape[2]
	m := &seq{name: "logistic", in: inputShape, classes: classes,
		specs: []layerSpec{{fanIn: d, fanOut: classes}}}
	m.alloc(seed)
	return m, nil
}

// NewMLP returns a fully connected network with the given hidden widths and
// activation ("tanh" or "relu"), Glorot-uniform weights drawn from a
// generator seeded with seed, and zero biases.
func NewMLP(inputShape [3]int, hidden []int, classes int, act string, seed uint64) (Model, error) {
	if err := checkCommon(inputShape, classes); err != nil {
		return nil, fmt.Errorf("models: mlp: %w", err)
	}
	if act != "tanh" && act != "relu" {
		return nil, fmt.Errorf("models: mlp: activation %q (want tanh or relu): %w", act, ErrInvalid)
	}
	d := inputShape[0] * inputShape[1] * inputShape[2]
	m := &seq{name: "mlp", in: inputShape, classes: classes, hidden: append([]int(nil), hidden...), act: act}
	for _, h := range hidden {
		if h <= 0 {
			return nil, fmt.Errorf("models: mlp: hidden width %d: %w", h, ErrInvalid)
		}
		m.specs = append(m.specs, layerSpec{fanIn: d, fanOut: h, act: act})
		d = h
	}
	m.specs = append(m.specs, layerSpec{fanIn: d, fanOut: classes})
	m.alloc(seed)
	return m, nil
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
	c, h, w := inputShape[0], inputShape[1], inputShape[2]
	m := &seq{name: "cifarcnn", in: inputShape, classes: classes}
	for _, out := range []int{32, 64, 128} {
		m.specs = append(m.specs,
			layerSpec{conv: true, fanIn: 9 * c, fanOut: out, act: "tanh"},
			layerSpec{conv: true, fanIn: 9 * out, fanOut: out, act: "tanh", pool: true})
		c = out
		h, w = h/2, w/2
	}
	if h == 0 || w == 0 {
		return nil, fmt.Errorf("models: cifarcnn: input %v too small for three 2x2 pools: %w", inputShape, ErrInvalid)
	}
	m.specs = append(m.specs,
		layerSpec{fanIn: c * h * w, fanOut: 128, act: "tanh"},
		layerSpec{fanIn: 128, fanOut: classes})
	m.alloc(seed)
	return m, nil
}

// alloc lays out the flat buffer and initializes it: Glorot-uniform weights
// (fan-in and fan-out of the convolution's receptive field for conv layers),
// zero biases.
func (m *seq) alloc(seed uint64) {
	off := 0
	for i, s := range m.specs {
		kind := "dense"
		if s.conv {
			kind = "conv"
		}
		w := ParamInfo{Name: fmt.Sprintf("%s%d/w", kind, i), Shape: []int{s.fanIn, s.fanOut}, Offset: off, Len: s.fanIn * s.fanOut}
		off += w.Len
		b := ParamInfo{Name: fmt.Sprintf("%s%d/b", kind, i), Shape: []int{s.fanOut}, Offset: off, Len: s.fanOut}
		off += b.Len
		m.layout = append(m.layout, w, b)
	}
	m.params = make([]float32, off)
	if m.name == "logistic" {
		return
	}
	rng := rand.New(rand.NewChaCha8(seedBytes(seed)))
	for i, s := range m.specs {
		fo := s.fanOut
		if s.conv {
			fo *= 9
		}
		lim := math.Sqrt(6 / float64(s.fanIn+fo))
		w := m.layout[2*i]
		for j := range w.Len {
			m.params[w.Offset+j] = float32((2*rng.Float64() - 1) * lim)
		}
	}
}

func seedBytes(seed uint64) [32]byte {
	var b [32]byte
	for i := range 8 {
		b[i] = byte(seed >> (8 * i))
	}
	b[8] = 'm'
	return b
}
