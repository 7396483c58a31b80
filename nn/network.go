// Package nn is the planned executor under differentially private
// training: it runs the forward pass, the backward pass, each example's
// gradient norm and the clipped gradient sum of a sequential network
// straight on the project's GEMM (package blas), with every buffer
// allocated once when the plan is made.
//
// A Network is a list of typed layers (Conv2D, Dense, MaxPool, Flatten)
// over one flat float32 parameter buffer; package models builds them. A
// Plan compiles a Network for a number of workers (one per core) and a
// chunk of examples per worker. A step splits the batch into chunks and
// runs each chunk through the whole network on one worker: the forward
// pass (convolutions as GEMMs: stride-1 'same' ones as implicit products
// over overlapping windows of a bordered copy of the input, where that is
// cheaper, the others over im2col rows; bias and activation fused; max
// pooling with stored argmax), the backward pass, and then, for private
// training, each example's gradient and its squared norm accumulated in
// float64; a Clipper turns the norms into scale factors and the worker
// adds the scaled gradients into its own accumulator. Convolution
// gradients are materialized per example (U_i^T G_i, one small GEMM each,
// the same flops as the batched weight gradient) so that the norm is the
// norm of exactly the vector that is added, and the clipped copy is
// added while in cache; dense layers use the
// outer-product norm ||u_i||^2 ||g_i||^2 and book-keeping (one GEMM over
// the chunk with the rows of G scaled, Bu et al. 2022). Nothing scales
// with the batch size except the per-example statistics, so variable
// (Poisson) batch sizes need no padding and no new plan.
//
// A Transformer (GPT-2- or BERT-shaped: token and position embeddings,
// multi-head self-attention, GELU MLPs, LayerNorms, low-rank adapters)
// runs on its own executor, SeqPlan, with the same Clipper contract; its
// linear layers over a sequence take the ghost norm where that is
// cheaper.
//
// Activations inside a worker are stored NHWC (one row of channels per
// pixel); inputs arrive CHW as in the rest of the project, and Flatten
// produces CHW order, so a network's parameters mean the same as in the
// gorgonia graph package models builds for it.
package nn

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Shape is the (channels, height, width) of one example's activation; a
// flat vector of n features is {n, 1, 1}.
type Shape struct{ C, H, W int }

// Size is C*H*W.
func (s Shape) Size() int { return s.C * s.H * s.W }

func (s Shape) flat() bool { return s.H == 1 && s.W == 1 }

// Param is a contiguous range of the flat parameter buffer.
type Param struct{ Offset, Len int }

// Activation is an element-wise nonlinearity fused into the affine layer
// before it.
type Activation uint8

// Activations.
const (
	Identity Activation = iota
	Tanh
	ReLU
	// GELU is the Gaussian error linear unit x Phi(x) (Hendrycks and
	// Gimpel 2016), the exact (erf) form PyTorch uses by default.
	GELU
	// Sigmoid is the logistic function 1/(1+exp(-x)).
	Sigmoid
	// LeakyReLU is x for x >= 0 and Slope*x below (the layer's Slope,
	// 0 < Slope < 1), as gorgonia's LeakyRelu(x, alpha).
	LeakyReLU
	lastActivation = LeakyReLU
)

func (a Activation) String() string {
	switch a {
	case Identity:
		return "identity"
	case Tanh:
		return "tanh"
	case ReLU:
		return "relu"
	case GELU:
		return "gelu"
	case Sigmoid:
		return "sigmoid"
	case LeakyReLU:
		return "leakyrelu"
	}
	return fmt.Sprintf("Activation(%d)", uint8(a))
}

// MarshalText writes the activation's name (model files record it so).
func (a Activation) MarshalText() ([]byte, error) {
	if a > lastActivation {
		return nil, dpcore.Invalidf("%v", a)
	}
	return []byte(a.String()), nil
}

// UnmarshalText reads a name written by MarshalText.
func (a *Activation) UnmarshalText(b []byte) error {
	for c := Identity; c <= lastActivation; c++ {
		if string(b) == c.String() {
			*a = c
			return nil
		}
	}
	return dpcore.Invalidf("activation %q (want identity, tanh, relu, gelu, sigmoid or leakyrelu)", b)
}

// Layer is one layer of a Network: Conv2D, Dense, MaxPool, AvgPool,
// GroupNorm, LayerNorm or Flatten (BatchNorm is refused).
type Layer interface {
	// out returns the layer's output shape for input shape in.
	out(in Shape) (Shape, error)
}

// Conv2D is a 2-D convolution Z = U W + b over the im2col-unfolded input U
// (one row per output pixel) followed by Act. Weight has shape
// (Kernel*Kernel*in channels, Out), rows ordered (channel, kernel row,
// kernel column) as gorgonia's Im2Col orders them; Bias has Out entries,
// or none (Len 0: a convolution without a bias).
// Slope is LeakyReLU's slope below zero (0 < Slope < 1; zero for the
// other activations).
type Conv2D struct {
	Out, Kernel, Stride, Pad int
	Act                      Activation
	Slope                    float32
	Weight, Bias             Param
}

// Dense is z = u W + b followed by Act; Weight has shape (in, Out)
// row-major, Bias Out entries or none (Len 0: no bias). Its input must be
// flat (see Flatten).
// Slope is LeakyReLU's slope below zero (0 < Slope < 1; zero for the
// other activations).
type Dense struct {
	Out          int
	Act          Activation
	Slope        float32
	Weight, Bias Param
}

// MaxPool is a Size x Size max pooling with stride Size; rows and columns
// that do not fill a window are dropped (floor), as in gorgonia and
// PyTorch.
type MaxPool struct{ Size int }

// Flatten turns a (C, H, W) activation into C*H*W features in CHW order.
type Flatten struct{}

func (c Conv2D) out(in Shape) (Shape, error) {
	if c.Out <= 0 || c.Kernel <= 0 || c.Stride <= 0 || c.Pad < 0 {
		return Shape{}, dpcore.Invalidf("conv2d out %d kernel %d stride %d pad %d", c.Out, c.Kernel, c.Stride, c.Pad)
	}
	h := (in.H+2*c.Pad-c.Kernel)/c.Stride + 1
	w := (in.W+2*c.Pad-c.Kernel)/c.Stride + 1
	if in.H+2*c.Pad < c.Kernel || in.W+2*c.Pad < c.Kernel || h <= 0 || w <= 0 {
		return Shape{}, dpcore.Invalidf("conv2d kernel %d does not fit input %dx%d with padding %d", c.Kernel, in.H, in.W, c.Pad)
	}
	if err := checkAffine(c.Weight, c.Bias, c.Kernel*c.Kernel*in.C, c.Out, c.Act, c.Slope); err != nil {
		return Shape{}, fmt.Errorf("conv2d: %w", err)
	}
	return Shape{c.Out, h, w}, nil
}

func checkAffine(w, b Param, fi, fo int, act Activation, slope float32) error {
	if w.Len != fi*fo || b.Len != fo && b.Len != 0 || w.Offset < 0 || b.Offset < 0 {
		return dpcore.Invalidf("weight %+v, bias %+v for fan-in %d, fan-out %d", w, b, fi, fo)
	}
	if act > lastActivation {
		return dpcore.Invalidf("%v", act)
	}
	if act == LeakyReLU && !(slope > 0 && slope < 1) {
		return dpcore.Invalidf("leakyrelu slope %v (want 0 < slope < 1)", slope)
	}
	if act != LeakyReLU && slope != 0 {
		return dpcore.Invalidf("slope %v with %v (only leakyrelu has one)", slope, act)
	}
	return nil
}

func (d Dense) out(in Shape) (Shape, error) {
	if !in.flat() {
		return Shape{}, dpcore.Invalidf("dense after a %dx%dx%d activation needs a Flatten first", in.C, in.H, in.W)
	}
	if d.Out <= 0 {
		return Shape{}, dpcore.Invalidf("dense out %d", d.Out)
	}
	if err := checkAffine(d.Weight, d.Bias, in.C, d.Out, d.Act, d.Slope); err != nil {
		return Shape{}, fmt.Errorf("dense: %w", err)
	}
	return Shape{d.Out, 1, 1}, nil
}

func (p MaxPool) out(in Shape) (Shape, error) {
	if p.Size <= 0 || in.H < p.Size || in.W < p.Size {
		return Shape{}, dpcore.Invalidf("max pool %d on a %dx%d input", p.Size, in.H, in.W)
	}
	return Shape{in.C, in.H / p.Size, in.W / p.Size}, nil
}

func (Flatten) out(in Shape) (Shape, error) { return Shape{in.Size(), 1, 1}, nil }

// Network is a sequential stack of layers on inputs of shape Input; the
// last layer's output (a flat vector) holds the logits.
type Network struct {
	Input  Shape
	Layers []Layer
}

// Shapes returns the activation shape before each layer and after the
// last one (len(Layers)+1 entries), or an error naming the first layer
// whose input does not fit.
func (n Network) Shapes() ([]Shape, error) {
	if n.Input.C <= 0 || n.Input.H <= 0 || n.Input.W <= 0 {
		return nil, dpcore.Invalid("nn", "input shape %+v", n.Input)
	}
	if len(n.Layers) == 0 {
		return nil, dpcore.Invalid("nn", "no layers")
	}
	out := []Shape{n.Input}
	cur := n.Input
	for i, l := range n.Layers {
		if l == nil {
			return nil, dpcore.Invalid("nn", "layer %d is nil", i)
		}
		next, err := l.out(cur)
		if err != nil {
			return nil, fmt.Errorf("nn: layer %d: %w", i, err)
		}
		out = append(out, next)
		cur = next
	}
	if !cur.flat() {
		return nil, dpcore.Invalid("nn", "the last layer's output %+v is not flat", cur)
	}
	return out, nil
}

// OutShape is the output shape of layer l on inputs of shape in, or an
// error saying why l does not fit.
func OutShape(l Layer, in Shape) (Shape, error) {
	if l == nil {
		return Shape{}, dpcore.Invalidf("nil layer")
	}
	return l.out(in)
}
