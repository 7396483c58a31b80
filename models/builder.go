package models

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// Builder assembles a model layer by layer: it names and lays out the
// parameters in one flat buffer, checks each layer's input shape as it is
// added, and remembers the first error (with the layer's name and the
// shapes involved), which Model returns. Residual adds a block whose body
// and shortcut are built by functions on a nested Builder.
//
// Weights start Glorot-uniform from a generator seeded with the seed
// (fan-in and fan-out of the receptive field for convolutions), biases at
// zero, normalization scales at one.
type Builder struct {
	root   *builderRoot
	shape  nn.Shape
	layers []nn.Layer
	specs  []LayerSpec // what added each layer, for the model file
	flat   bool        // a Flatten or Dense was added: the activation is features
}

type builderRoot struct {
	name     string
	in       [3]int
	seed     uint64
	zero     bool
	layout   []ParamInfo
	init     []float64 // per layout entry: Glorot limit (> 0), 0 for zeros, -1 for ones
	affine   int       // affine layers so far (default names)
	err      error
	residual int
	dropouts int
	total    float64 // parameters so far
	limit    int     // most parameters allowed
}

// maxBuilderParams bounds a model's parameters: 2^31 float32 (8 GiB), more
// than this machine's memory can train.
const maxBuilderParams = 1 << 31

// NewBuilder starts a model called name on inputs of inputShape
// (channels, height, width).
func NewBuilder(name string, inputShape [3]int, seed uint64) *Builder {
	r := &builderRoot{name: name, in: inputShape, seed: seed, limit: maxBuilderParams}
	for _, d := range inputShape {
		if d <= 0 {
			r.err = dpcore.Invalidf("input shape %v", inputShape)
		}
	}
	return &Builder{root: r, shape: nn.Shape{C: inputShape[0], H: inputShape[1], W: inputShape[2]}}
}

// ZeroWeights starts every parameter at zero (logistic regression, whose
// loss is convex, needs no random start).
func (b *Builder) ZeroWeights() *Builder {
	b.root.zero = true
	return b
}

// Shape is the activation shape the next layer will see.
func (b *Builder) Shape() nn.Shape { return b.shape }

func (b *Builder) param(name string, shape []int, init float64) nn.Param {
	r := b.root
	off := 0
	if k := len(r.layout); k > 0 {
		off = r.layout[k-1].Offset + r.layout[k-1].Len
	}
	size := 1.0
	for _, d := range shape {
		if d <= 0 {
			r.fail(dpcore.Invalidf("parameter %s has shape %v", name, shape))
		}
		size *= float64(d)
	}
	if r.total+size > float64(r.limit) {
		r.fail(dpcore.Invalidf("parameter %s %v brings the model to %.5g parameters (%.3g GiB as float32), over the limit of %d",
			name, shape, r.total+size, 4*(r.total+size)/(1<<30), r.limit))
	}
	if r.err != nil {
		return nn.Param{}
	}
	r.total += size
	n := int(size)
	for _, p := range r.layout {
		if p.Name == name {
			r.fail(dpcore.Invalidf("parameter name %q used twice", name))
		}
	}
	r.layout = append(r.layout, ParamInfo{Name: name, Shape: shape, Offset: off, Len: n})
	r.init = append(r.init, init)
	return nn.Param{Offset: off, Len: n}
}

func (r *builderRoot) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// add appends l, which spec describes, after checking it against the
// current shape.
func (b *Builder) add(spec LayerSpec, name string, l nn.Layer) *Builder {
	if b.root.err != nil {
		return b
	}
	out, err := nn.OutShape(l, b.shape)
	if err != nil {
		b.root.fail(fmt.Errorf("layer %s on a %dx%dx%d input: %w", name, b.shape.C, b.shape.H, b.shape.W, err))
		return b
	}
	b.layers = append(b.layers, l)
	b.specs = append(b.specs, spec)
	b.shape = out
	return b
}

func (b *Builder) layerName(name, kind string) string {
	if name == "" {
		name = fmt.Sprintf("%s%d", kind, b.root.affine)
	}
	b.root.affine++
	return name
}

// Conv2D adds a convolution with out channels, a kernel x kernel window,
// the given stride and zero padding, followed by act. An empty name means
// "conv<k>" with k the number of layers with weights so far.
func (b *Builder) Conv2D(name string, out, kernel, stride, pad int, act nn.Activation) *Builder {
	if b.root.err != nil {
		return b
	}
	name = b.layerName(name, "conv")
	if out <= 0 || kernel <= 0 {
		b.root.fail(dpcore.Invalidf("layer %s: %d outputs, kernel %d", name, out, kernel))
		return b
	}
	if float64(kernel)*float64(kernel)*float64(b.shape.C) > maxBuilderParams {
		b.root.fail(dpcore.Invalidf("layer %s: kernel %d on %d channels", name, kernel, b.shape.C))
		return b
	}
	fi := kernel * kernel * b.shape.C
	lim := math.Sqrt(6 / float64(fi+out*kernel*kernel))
	w := b.param(name+"/w", []int{fi, out}, lim)
	bias := b.param(name+"/b", []int{out}, 0)
	spec := LayerSpec{Kind: Conv2DLayer, Name: name, Out: out, Kernel: kernel, Stride: stride, Pad: pad, Act: act}
	return b.add(spec, name, nn.Conv2D{Out: out, Kernel: kernel, Stride: stride, Pad: pad, Act: act, Weight: w, Bias: bias})
}

// Dense adds a fully connected layer with out units followed by act,
// flattening a spatial input first. An empty name means "dense<k>".
func (b *Builder) Dense(name string, out int, act nn.Activation) *Builder {
	if b.root.err != nil {
		return b
	}
	if !b.flat {
		b.Flatten()
	}
	name = b.layerName(name, "dense")
	if out <= 0 {
		b.root.fail(dpcore.Invalidf("layer %s: %d outputs", name, out))
		return b
	}
	lim := math.Sqrt(6 / float64(b.shape.C+out))
	w := b.param(name+"/w", []int{b.shape.C, out}, lim)
	bias := b.param(name+"/b", []int{out}, 0)
	b.flat = true
	return b.add(LayerSpec{Kind: DenseLayer, Name: name, Out: out, Act: act}, name, nn.Dense{Out: out, Act: act, Weight: w, Bias: bias})
}

// MaxPool adds a size x size max pooling with stride size.
func (b *Builder) MaxPool(size int) *Builder {
	return b.add(LayerSpec{Kind: MaxPoolLayer, Size: size}, fmt.Sprintf("maxpool%d", len(b.layers)), nn.MaxPool{Size: size})
}

// AvgPool adds a size x size average pooling with stride size.
func (b *Builder) AvgPool(size int) *Builder {
	return b.add(LayerSpec{Kind: AvgPoolLayer, Size: size}, fmt.Sprintf("avgpool%d", len(b.layers)), nn.AvgPool{Size: size})
}

// Flatten turns a spatial activation into features (CHW order).
func (b *Builder) Flatten() *Builder {
	b.flat = true
	return b.add(LayerSpec{Kind: FlattenLayer}, fmt.Sprintf("flatten%d", len(b.layers)), nn.Flatten{})
}

// GroupNorm adds group normalization over groups groups of channels with
// a learnable per-channel scale and shift.
func (b *Builder) GroupNorm(name string, groups int) *Builder {
	return b.GroupNormAct(name, groups, nn.Identity)
}

// GroupNormAct is GroupNorm followed by act, fused.
func (b *Builder) GroupNormAct(name string, groups int, act nn.Activation) *Builder {
	if b.root.err != nil {
		return b
	}
	name = b.layerName(name, "groupnorm")
	c := b.shape.C
	w := b.param(name+"/w", []int{c}, -1)
	bias := b.param(name+"/b", []int{c}, 0)
	return b.add(LayerSpec{Kind: GroupNormLayer, Name: name, Groups: groups, Act: act}, name, nn.GroupNorm{Groups: groups, Act: act, Weight: w, Bias: bias})
}

// LayerNorm adds layer normalization over all features of an example with
// an element-wise learnable scale and shift.
func (b *Builder) LayerNorm(name string) *Builder {
	if b.root.err != nil {
		return b
	}
	name = b.layerName(name, "layernorm")
	n := b.shape.Size()
	w := b.param(name+"/w", []int{n}, -1)
	bias := b.param(name+"/b", []int{n}, 0)
	return b.add(LayerSpec{Kind: LayerNormLayer, Name: name}, name, nn.LayerNorm{Weight: w, Bias: bias})
}

// BatchNorm is refused: the model's error says why and names GroupNorm.
func (b *Builder) BatchNorm() *Builder {
	return b.add(LayerSpec{}, fmt.Sprintf("batchnorm%d", len(b.layers)), nn.BatchNorm{})
}

// Residual adds a block whose output is body(x) + shortcut(x); a nil
// shortcut is the identity. The two functions add layers to nested
// builders starting from the current shape, and must end at equal shapes.
func (b *Builder) Residual(body, shortcut func(*Builder)) *Builder {
	if b.root.err != nil {
		return b
	}
	b.root.residual++
	name := fmt.Sprintf("residual%d", b.root.residual)
	bb := &Builder{root: b.root, shape: b.shape, flat: b.flat}
	body(bb)
	sb := &Builder{root: b.root, shape: b.shape, flat: b.flat}
	if shortcut != nil {
		shortcut(sb)
	}
	if b.root.err != nil {
		return b
	}
	if bb.shape != sb.shape {
		b.root.fail(dpcore.Invalidf("%s: body ends at %dx%dx%d, shortcut at %dx%dx%d", name,
			bb.shape.C, bb.shape.H, bb.shape.W, sb.shape.C, sb.shape.H, sb.shape.W))
		return b
	}
	b.flat = bb.flat
	spec := LayerSpec{Kind: ResidualLayer, Body: bb.specs, Shortcut: sb.specs}
	return b.add(spec, name, nn.Residual{Body: bb.layers, Shortcut: sb.layers})
}

// Model finishes the model: the last layer's output must be a flat vector
// of classes >= 2 logits.
func (b *Builder) Model() (Model, error) {
	r := b.root
	if r.err != nil {
		return nil, dpcore.Invalid("models", "%s: %w", r.name, r.err)
	}
	if b.shape.H != 1 || b.shape.W != 1 || b.shape.C < 2 {
		return nil, dpcore.Invalid("models", "%s: output %dx%dx%d is not a vector of at least 2 logits", r.name, b.shape.C, b.shape.H, b.shape.W)
	}
	m := &seq{name: r.name, in: r.in, classes: b.shape.C, layers: b.layers, layout: r.layout, spec: b.specs, zero: r.zero}
	n := 0
	if k := len(r.layout); k > 0 {
		n = r.layout[k-1].Offset + r.layout[k-1].Len
	}
	m.params = make([]float32, n)
	if r.zero {
		return m, nil
	}
	rng := rand.New(rand.NewChaCha8(seedBytes(r.seed)))
	for k, p := range r.layout {
		switch lim := r.init[k]; {
		case lim > 0:
			for j := range p.Len {
				m.params[p.Offset+j] = float32((2*rng.Float64() - 1) * lim)
			}
		case lim < 0:
			for j := range p.Len {
				m.params[p.Offset+j] = 1
			}
		}
	}
	return m, nil
}

// Embedding adds an embedding of the input's columns as the first layer:
// the first numeric columns pass through unchanged and every later column
// k holds an id (as a float, -1 when absent) into its own table of
// vocab[k] vectors of dims[k] entries; with one table (len(vocab) = 1)
// every id column shares it and bag may sum or average them.
func (b *Builder) Embedding(name string, numeric int, vocab, dims []int, bag nn.Bag) *Builder {
	if b.root.err != nil {
		return b
	}
	name = b.layerName(name, "embedding")
	if len(vocab) == 0 || len(vocab) != len(dims) {
		b.root.fail(dpcore.Invalidf("layer %s: %d vocabularies, %d dimensions", name, len(vocab), len(dims)))
		return b
	}
	e := nn.Embedding{Numeric: numeric, Bag: bag}
	for k := range vocab {
		if vocab[k] <= 0 || dims[k] <= 0 {
			b.root.fail(dpcore.Invalidf("layer %s: table %d: vocabulary %d, dimension %d", name, k, vocab[k], dims[k]))
			return b
		}
		lim := math.Sqrt(6 / float64(1+dims[k]))
		w := b.param(fmt.Sprintf("%s/table%d", name, k), []int{vocab[k], dims[k]}, lim)
		e.Tables = append(e.Tables, nn.EmbeddingTable{Vocab: vocab[k], Dim: dims[k], Weight: w})
	}
	b.flat = true
	spec := LayerSpec{Kind: EmbeddingLayer, Name: name, Numeric: numeric, Vocab: slices.Clone(vocab), Dims: slices.Clone(dims), Bag: bag}
	return b.add(spec, name, e)
}

// Dropout adds inverted dropout at the given rate (nn.Dropout): during
// training steps each activation is zeroed with probability rate and the
// others scaled by 1/(1-rate); prediction passes activations through. The
// mask's seed is derived from the builder's seed and the number of
// dropout layers before this one, and recorded in the model file.
func (b *Builder) Dropout(rate float64) *Builder {
	b.root.dropouts++
	x := b.root.seed ^ 0x6a09e667f3bcc909*uint64(b.root.dropouts)
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return b.dropout(rate, x^(x>>31))
}

func (b *Builder) dropout(rate float64, seed uint64) *Builder {
	return b.add(LayerSpec{Kind: DropoutLayer, Rate: rate, Seed: seed}, fmt.Sprintf("dropout%d", len(b.layers)), nn.Dropout{Rate: rate, Seed: seed})
}
