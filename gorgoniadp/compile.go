package gorgoniadp

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"gorgonia.org/gorgonia"
)

// The compiler reads a user's graph as a stack of the built-in layers of
// package nn, so that package clip's batched executor (one pass over a
// chunk of examples, per-example norms by book-keeping) computes its
// clipped sums instead of one pass of gorgonia's VM per example. The
// layers view the model's flat parameter buffer at the parameters'
// offsets, so the user's parameter tensors, the optimizer and the
// executor share one buffer.
//
// The recognized patterns (x the layer's input, W and b parameter nodes):
//
//   - dense: Add(Mul(x, W), b), also through BroadcastAdd, or Mul(x, W)
//     without a bias, x of shape (1, in) (a Reshape of a spatial
//     activation flattens it in CHW order), W of shape (in, out), b of
//     out values;
//   - convolution in the built-in layer's layout: Transpose(Reshape(
//     dense(Reshape(Im2Col(x)), W, b), (1, H, W, out)), 0, 3, 1, 2),
//     W of shape (C*k*k, out), square kernel, equal pads and strides,
//     dilation 1; or gorgonia's Conv2d(x, K), with or without a channel
//     bias (its kernel (out, C, kh, kw) kept transposed, compiled.trans);
//   - Tanh, Sigmoid, Rectify or LeakyRelu (alpha between 0 and 1)
//     directly after a dense or convolution layer;
//   - MaxPool2D and AveragePool2D with a square window, stride equal to
//     the window and no padding (AveragePool2D: windows that tile the
//     activation);
//   - Dropout(x, p), as the built-in nn.Dropout of rate p;
//   - LayerNorm and GroupNorm as LayerNorm and GroupNorm of this package
//     build them (norm.go: (x - mean) / Sqrt(var + eps), the biased
//     variance over groups of consecutive features, then the affine per
//     feature or per channel), with Tanh or Rectify after them;
//   - LogSoftMax of the logits (cross-entropy of log-softmax outputs is
//     that of the logits) and, when the graph has its own Loss, the
//     cross-entropy Neg(Sum(HadamardProd(Label, LogSoftMax(Logits)))).
//
// Anything else (SoftPlus and the other element-wise functions, which the
// built-in layers do not have, an activation not right after a layer, a
// parameter used twice, a Mean loss, ...) leaves the model on the
// per-example path, and Model.Compiled names the op.

// compiled is the model the batched executor runs: the built-in layers
// over the gorgonia model's flat parameter buffer.
type compiled struct {
	m   *Model
	net nn.Network
	// With kernels of gorgonia's Conv2d (trans), the executor's parameters
	// are buf: the flat buffer with those kernels transposed, copied in
	// before each call (pull), the gradient transposed back (push).
	trans   []transposition
	buf     []float32
	scratch []float32
}

// transposition is a rows x cols parameter (row-major at off in the flat
// buffer) that the executor holds as its cols x rows transpose.
type transposition struct{ off, rows, cols int }

// pull copies the model's parameters into the executor's buffer.
func (c *compiled) pull() {
	if c.buf == nil {
		return
	}
	copy(c.buf, c.m.flat)
	for _, t := range c.trans {
		transpose32(c.buf[t.off:t.off+t.rows*t.cols], c.m.flat[t.off:t.off+t.rows*t.cols], t.rows, t.cols)
	}
}

// push turns a gradient in the executor's layout (dst) into the model's.
func (c *compiled) push(dst []float32) {
	for _, t := range c.trans {
		n := t.rows * t.cols
		copy(c.scratch[:n], dst[t.off:t.off+n])
		transpose32(dst[t.off:t.off+n], c.scratch[:n], t.cols, t.rows)
	}
}

// transpose32 writes the transpose of src (rows x cols, row-major) into
// dst (cols x rows).
func transpose32(dst, src []float32, rows, cols int) {
	for i := range rows {
		for j := range cols {
			dst[j*rows+i] = src[i*cols+j]
		}
	}
}

func (c *compiled) Name() string { return c.m.name }
func (c *compiled) Params() []float32 {
	if c.buf != nil {
		return c.buf
	}
	return c.m.flat
}
func (c *compiled) NumParams() int     { return len(c.m.flat) }
func (c *compiled) InputShape() [3]int { return c.m.shape }
func (c *compiled) Classes() int       { return c.m.classes }
func (c *compiled) Network() nn.Network {
	return nn.Network{Input: c.net.Input, Layers: slices.Clone(c.net.Layers)}
}
func (c *compiled) Save(w io.Writer) error { return c.m.Save(w) }
func (c *compiled) Load(r io.Reader) error { return c.m.Load(r) }

func (c *compiled) Layout() []models.ParamInfo {
	out := make([]models.ParamInfo, len(c.m.names))
	for i, n := range c.m.names {
		out[i] = models.ParamInfo{Name: n, Shape: slices.Clone(c.m.shapes[i]), Offset: c.m.offsets[i], Len: c.m.views[i].Size()}
	}
	return out
}

var _ models.Model = (*compiled)(nil)

// notCompiled says which node kept a graph off the batched executor, in
// gorgonia's API names.
type notCompiled struct {
	op   string // gorgonia's API name of the op, e.g. "SoftPlus"
	node string
	why  string
}

func (e *notCompiled) Error() string {
	s := e.op
	// gorgonia names unnamed nodes by their op and arguments ("tanh(%3)"):
	// only a name the user gave helps.
	if e.node != "" && !strings.Contains(e.node, "%") {
		s += " (node " + e.node + ")"
	}
	if e.why != "" {
		s += ": " + e.why
	}
	return s
}

// value is what the compiler knows of a node: the layers computing it
// from the input and its activation shape.
type value struct {
	layers []nn.Layer
	shape  nn.Shape
}

// compiler holds the state of one compilation.
type compiler struct {
	m     *Model
	trans []transposition
	index map[*gorgonia.Node]int // parameter node -> its index in Params
	used  []bool
}

// compileGraph reads m's graph as built-in layers, or says which op it
// cannot read. userLoss says whether the graph came with its own Loss.
func compileGraph(m *Model, userLoss bool) (*compiled, *notCompiled) {
	c := &compiler{m: m, index: map[*gorgonia.Node]int{}, used: make([]bool, len(m.g.Params))}
	for i, p := range m.g.Params {
		c.index[p] = i
	}
	logits := m.g.Logits
	if userLoss {
		l, nc := c.crossEntropy(m.g.Loss)
		if nc != nil {
			return nil, nc
		}
		logits = l
	}
	// Cross-entropy of log-softmax outputs equals that of the logits
	// (log-softmax is idempotent), and the argmax is the same.
	if isLogSoftMax(logits) {
		logits = children(logits)[0]
	}
	v, nc := c.node(logits)
	if nc != nil {
		return nil, nc
	}
	if !flat(v.shape) {
		return nil, &notCompiled{op: "Logits", node: logits.Name(), why: "not a vector of class scores"}
	}
	net := nn.Network{Input: nn.Shape{C: m.shape[0], H: m.shape[1], W: m.shape[2]}, Layers: v.layers}
	shapes, err := net.Shapes()
	if err != nil || shapes[len(shapes)-1].C != m.classes {
		return nil, &notCompiled{op: "Logits", node: logits.Name(), why: fmt.Sprintf("the built-in layers do not fit: %v", err)}
	}
	cm := &compiled{m: m, net: net, trans: c.trans}
	if len(c.trans) > 0 {
		cm.buf = make([]float32, len(m.flat))
		n := 0
		for _, t := range c.trans {
			n = max(n, t.rows*t.cols)
		}
		cm.scratch = make([]float32, n)
	}
	return cm, nil
}

// flat says whether s is a vector (C features).
func flat(s nn.Shape) bool { return s.H == 1 && s.W == 1 }

// node reads n as layers on the input.
func (c *compiler) node(n *gorgonia.Node) (value, *notCompiled) {
	if n == c.m.g.Input {
		s := c.m.shape
		return value{shape: nn.Shape{C: s[0], H: s[1], W: s[2]}}, nil
	}
	op := n.Op()
	if op == nil {
		if _, ok := c.index[n]; ok {
			return value{}, &notCompiled{op: "a parameter", node: n.Name(), why: "used other than as the weight or bias of a layer"}
		}
		return value{}, &notCompiled{op: "a constant input", node: n.Name()}
	}
	switch t := opType(op); {
	case t == "reshapeOp":
		return c.reshape(n)
	case t == "transposeOp":
		return c.conv(n)
	case t == "maxPoolOp" || t == "avgPoolOp":
		return c.pool(n)
	case t == "dropoutOp":
		return c.dropout(n)
	case t == "linAlgBinOp" && op.String() == "A × B":
		return c.dense(n) // without a bias
	case t == "elemUnaryOp" && (description(t, op) == "tanh" || description(t, op) == "sigmoid"),
		t == "elemBinOp" && (description(t, op) == "+" || description(t, op) == "⊙"):
		a, act, nc := c.peel(n)
		if nc == nil && isNorm(a) {
			return c.norm(n, a, act)
		}
		if nc == nil && isConv2d(a) {
			return c.conv2d(n, a, nil, act) // without a bias
		}
		if nc == nil && isBinary(a.Op(), "+") {
			ch := children(a)
			if isConv2d(ch[0]) {
				return c.conv2d(n, ch[0], ch[1], act)
			}
			if isConv2d(ch[1]) {
				return c.conv2d(n, ch[1], ch[0], act)
			}
		}
		return c.dense(n)
	}
	return value{}, c.refuse(n, "")
}

// refuse is the notCompiled of node n.
func (c *compiler) refuse(n *gorgonia.Node, why string) *notCompiled {
	return &notCompiled{op: userOp(n), node: oneLine(n.Name()), why: why}
}

// reshape reads a Reshape: to (1, D) or (D) it flattens (CHW order, as
// the built-in Flatten); to the activation's own (1, C, H, W) it does
// nothing.
func (c *compiler) reshape(n *gorgonia.Node) (value, *notCompiled) {
	v, nc := c.node(children(n)[0])
	if nc != nil {
		return v, nc
	}
	s := n.Shape()
	switch {
	case len(s) == 1 || len(s) == 2 && s[0] == 1:
		if !flat(v.shape) {
			v.layers = append(slices.Clone(v.layers), nn.Flatten{})
			v.shape = nn.Shape{C: v.shape.Size(), H: 1, W: 1}
		}
		return v, nil
	case len(s) == 4 && s[0] == 1 && s[1] == v.shape.C && s[2] == v.shape.H && s[3] == v.shape.W:
		return v, nil
	}
	why := fmt.Sprintf("to %v from a %dx%dx%d activation", s, v.shape.C, v.shape.H, v.shape.W)
	if children(n)[0] == c.m.g.Input && len(s) == 4 && s[0] == 1 {
		why += fmt.Sprintf(": give Graph.Shape {%d, %d, %d}, the data's shape, to read the input so", s[1], s[2], s[3])
	}
	return value{}, c.refuse(n, why)
}

// affine reads n as act(Add(Mul(x, W), b)), act Tanh, Rectify or none,
// and marks W and b used.
func (c *compiler) affine(n *gorgonia.Node) (x *gorgonia.Node, w, b int, act activation, nc *notCompiled) {
	a, act, nc := c.peel(n)
	if nc != nil {
		return nil, 0, 0, activation{}, nc
	}
	if isConv2d(a) {
		return nil, 0, 0, activation{}, &notCompiled{op: "Conv2d", node: oneLine(a.Name()), why: "where a dense layer's product Mul(x, W) was expected"}
	}
	if isProduct(a) { // without a bias
		x, w, b, nc := c.product(a, nil)
		return x, w, b, act, nc
	}
	if !isBinary(a.Op(), "+") {
		return nil, 0, 0, activation{}, c.refuse(n, "only directly after a dense or convolution layer (Add(Mul(x, W), b))")
	}
	ch := children(a)
	mul, bias := ch[0], ch[1]
	if !isProduct(mul) {
		mul, bias = bias, mul
	}
	if !isProduct(mul) {
		return nil, 0, 0, activation{}, c.refuse(a, "of other than a product Mul(x, W) and a bias")
	}
	x, w, b, nc = c.product(mul, bias)
	return x, w, b, act, nc
}

// product reads mul as Mul(x, W) and bias, unless nil, as its bias
// (b -1: none).
func (c *compiler) product(mul, bias *gorgonia.Node) (x *gorgonia.Node, w, b int, nc *notCompiled) {
	x, wn := children(mul)[0], children(mul)[1]
	out := wn.Shape()[len(wn.Shape())-1]
	if w, nc = c.param(wn, mul); nc != nil {
		return nil, 0, 0, nc
	}
	if ws := wn.Shape(); len(ws) != 2 || len(x.Shape()) != 2 || x.Shape()[1] != ws[0] {
		return nil, 0, 0, c.refuse(mul, fmt.Sprintf("of %v by a weight of shape %v: want x of shape (rows, in) by W of shape (in, out)", x.Shape(), ws))
	}
	b = -1
	if bias != nil {
		if b, nc = c.bias(bias, out); nc != nil {
			return nil, 0, 0, nc
		}
	}
	return x, w, b, nil
}

// activation is a layer's activation and, for LeakyReLU, its slope.
type activation struct {
	act   nn.Activation
	slope float32
}

// peel reads n as Tanh(a), Sigmoid(a), Rectify(a), LeakyRelu(a, alpha)
// or a.
func (c *compiler) peel(n *gorgonia.Node) (a *gorgonia.Node, act activation, nc *notCompiled) {
	switch op := n.Op(); {
	case isUnary(op, "tanh"):
		return children(n)[0], activation{act: nn.Tanh}, nil
	case isUnary(op, "sigmoid"):
		return children(n)[0], activation{act: nn.Sigmoid}, nil
	case isBinary(op, "⊙"):
		r, ok := rectified(n)
		if !ok {
			return nil, activation{}, c.refuse(n, "other than in Rectify")
		}
		return r, activation{act: nn.ReLU}, nil
	case isBinary(op, "+"):
		x, alpha, ok := leaky(n)
		if !ok {
			break
		}
		if !(alpha > 0 && alpha < 1) {
			return nil, activation{}, &notCompiled{op: "LeakyRelu", node: oneLine(n.Name()), why: fmt.Sprintf("with alpha %v: the built-in layer's slope is between 0 and 1", alpha)}
		}
		return x, activation{act: nn.LeakyReLU, slope: alpha}, nil
	}
	return n, activation{}, nil
}

// leaky reads n as LeakyRelu(x, alpha) = Add(HadamardProd(x, Gte(x, 0)),
// HadamardProd(HadamardProd(x, Lt(x, 0)), alpha)) and returns x and
// alpha.
func leaky(n *gorgonia.Node) (*gorgonia.Node, float32, bool) {
	ch := children(n)
	if len(ch) != 2 || !isBinary(ch[0].Op(), "⊙") || !isBinary(ch[1].Op(), "⊙") {
		return nil, 0, false
	}
	x, ok := rectified(ch[0])
	if !ok {
		return nil, 0, false
	}
	neg, al := children(ch[1])[0], children(ch[1])[1]
	if !isBinary(neg.Op(), "⊙") || !al.IsScalar() || al.Op() == nil || opType(al.Op()) != "constantScalar" {
		return nil, 0, false
	}
	nc := children(neg)
	if nc[0] != x || !isBinary(nc[1].Op(), "<") {
		return nil, 0, false
	}
	if cc := children(nc[1]); cc[0] != x || !cc[1].IsScalar() {
		return nil, 0, false
	} else if z, err := float32s(cc[1].Value()); err != nil || len(z) != 1 || z[0] != 0 {
		return nil, 0, false
	}
	a, err := float32s(al.Value())
	if err != nil || len(a) != 1 {
		return nil, 0, false
	}
	return x, a[0], true
}

// conv2d reads act(Add(Conv2d(x, K), b)) or, bias nil, act(Conv2d(x,
// K)): gorgonia's Conv2d, kernel K of shape (out, C, k, k), plus a bias b
// of out values broadcast over the example and the pixels. The built-in layer's weight is K's
// transpose (C*k*k, out): the compiled model keeps it transposed in a
// buffer of its own (compiled.pull, compiled.push).
func (c *compiler) conv2d(n, t, bias *gorgonia.Node, act activation) (value, *notCompiled) {
	r := children(t)[0]
	prod := children(r)[0]
	pc := children(prod)
	patch, flat := pc[0], pc[1]
	odd := &notCompiled{op: "Conv2d", node: oneLine(t.Name()), why: "not as gorgonia.Conv2d builds it"}
	if t.Op().String() != "Aᵀ{0, 3, 1, 2}" || patch.Op() == nil || opType(patch.Op()) != "reshapeOp" || flat.Op() == nil || opType(flat.Op()) != "reshapeOp" {
		return value{}, odd
	}
	col, kn := children(patch)[0], children(flat)[0]
	if col.Op() == nil || opType(col.Op()) != "im2colOp" {
		return value{}, odd
	}
	k, nc := c.param(kn, t)
	if nc != nil {
		return value{}, nc
	}
	ks := kn.Shape()
	if len(ks) != 4 {
		return value{}, odd
	}
	out := ks[0]
	b := -1 // without a bias
	if bias != nil {
		if b, nc = c.channelBias(bias, out); nc != nil {
			return value{}, nc
		}
	}
	v, l, nc := c.unfold(t, col, out, act, k, b)
	if nc != nil {
		return v, nc
	}
	c.trans = append(c.trans, transposition{off: c.m.offsets[k], rows: out, cols: ks[1] * ks[2] * ks[3]})
	v.layers = append(slices.Clone(v.layers), l)
	return v, nil
}

// unfold reads the Im2Col node col of a convolution with out channels
// whose output is node t, and returns the value of its input and the
// layer (the output shape in v.shape).
func (c *compiler) unfold(t, col *gorgonia.Node, out int, act activation, w, b int) (value, nn.Conv2D, *notCompiled) {
	var kh, kw, ph, pw, sh, sw, dh, dw int
	if _, err := fmt.Sscanf(col.Op().String(), "im2col<(%d,%d), (%d, %d), (%d,%d) (%d, %d)>", &kh, &kw, &ph, &pw, &sh, &sw, &dh, &dw); err != nil {
		return value{}, nn.Conv2D{}, c.refuse(col, "")
	}
	if kh != kw || ph != pw || sh != sw || dh != 1 || dw != 1 {
		return value{}, nn.Conv2D{}, c.refuse(col, fmt.Sprintf("with kernel (%d, %d), pad (%d, %d), stride (%d, %d), dilation (%d, %d): the built-in convolution has a square kernel, equal pads and strides, no dilation", kh, kw, ph, pw, sh, sw, dh, dw))
	}
	v, nc := c.node(children(col)[0])
	if nc != nil {
		return v, nn.Conv2D{}, nc
	}
	l := nn.Conv2D{Out: out, Kernel: kh, Stride: sh, Pad: ph, Act: act.act, Slope: act.slope, Weight: c.span(w), Bias: c.span(b)}
	os, err := nn.OutShape(l, v.shape)
	s := t.Shape()
	if err != nil || len(s) != 4 || s[0] != 1 || s[1] != os.C || s[2] != os.H || s[3] != os.W {
		return value{}, nn.Conv2D{}, c.refuse(t, fmt.Sprintf("of shape %v on a %dx%dx%d activation", s, v.shape.C, v.shape.H, v.shape.W))
	}
	v.shape = os
	return v, l, nil
}

// channelBias reads n, of shape (1, out, H, W), as a parameter of out
// values, one per channel: repeats along axes 0, 2 and 3 of a (1, out,
// 1, 1) reshape of it.
func (c *compiler) channelBias(n *gorgonia.Node, out int) (int, *notCompiled) {
	top := n
	refuse := c.refuse(top, fmt.Sprintf("of a convolution and a bias that is not one parameter of %d values broadcast over the pixels (shape (1, %d, 1, 1))", out, out))
	for n.Op() != nil && opType(n.Op()) == "repeatOp" {
		if a := n.Op().String(); a != "Repeat0" && a != "Repeat2" && a != "Repeat3" {
			return 0, refuse
		}
		n = children(n)[0]
	}
	if s := n.Shape(); len(s) != 4 || s[0] != 1 || s[1] != out || s[2] != 1 || s[3] != 1 {
		return 0, refuse
	}
	for n.Op() != nil {
		if opType(n.Op()) != "reshapeOp" {
			return 0, refuse
		}
		n = children(n)[0]
	}
	if n.Shape().TotalSize() != out {
		return 0, refuse
	}
	return c.param(n, top)
}

// param marks parameter node p (read by node n) used and returns its
// index.
func (c *compiler) param(p, n *gorgonia.Node) (int, *notCompiled) {
	i, ok := c.index[p]
	if !ok {
		return 0, c.refuse(n, fmt.Sprintf("of node %s, which is not a parameter", oneLine(p.Name())))
	}
	if c.used[i] {
		return 0, &notCompiled{op: "a parameter", node: oneLine(p.Name()), why: "used twice"}
	}
	c.used[i] = true
	return i, nil
}

// bias reads n as a parameter of out values broadcast along the rows
// (Reshape and repeats along axis 0 keep each row a copy of it).
func (c *compiler) bias(n *gorgonia.Node, out int) (int, *notCompiled) {
	top := n
	for n.Op() != nil {
		s := n.Shape()
		t := opType(n.Op())
		if !(t == "reshapeOp" || t == "repeatOp" && n.Op().String() == "Repeat0") || len(s) == 0 || s[len(s)-1] != out {
			return 0, c.refuse(top, fmt.Sprintf("of a bias that is not one parameter of %d values broadcast along the rows", out))
		}
		n = children(n)[0]
	}
	if n.Shape().TotalSize() != out {
		return 0, c.refuse(top, fmt.Sprintf("of a bias of %d values to %d outputs", n.Shape().TotalSize(), out))
	}
	return c.param(n, top)
}

// dense reads a dense layer act(Add(Mul(x, W), b)) with x of shape
// (1, in).
func (c *compiler) dense(n *gorgonia.Node) (value, *notCompiled) {
	x, w, b, act, nc := c.affine(n)
	if nc != nil {
		return value{}, nc
	}
	if s := x.Shape(); s[0] != 1 {
		return value{}, c.refuse(n, fmt.Sprintf("on an input of shape %v: want (1, in), one example", s))
	}
	v, nc := c.node(x)
	if nc != nil {
		return v, nc
	}
	v.layers = slices.Clone(v.layers)
	if !flat(v.shape) {
		v.layers = append(v.layers, nn.Flatten{})
		v.shape = nn.Shape{C: v.shape.Size(), H: 1, W: 1}
	}
	out := c.m.g.Params[w].Shape()[1]
	v.layers = append(v.layers, nn.Dense{Out: out, Act: act.act, Slope: act.slope, Weight: c.span(w), Bias: c.span(b)})
	v.shape = nn.Shape{C: out, H: 1, W: 1}
	return v, nil
}

// span is parameter i's range of the flat buffer.
func (c *compiler) span(i int) nn.Param {
	if i < 0 {
		return nn.Param{} // no bias
	}
	return nn.Param{Offset: c.m.offsets[i], Len: c.m.views[i].Size()}
}

// conv reads a convolution in the built-in layer's layout:
// Transpose(Reshape(act(Add(Mul(Reshape(Im2Col(x)), W), b)), (1, H, W,
// out)), 0, 3, 1, 2).
func (c *compiler) conv(n *gorgonia.Node) (value, *notCompiled) {
	why := "other than after a convolution in the built-in layout (Transpose(Reshape(Add(Mul(Reshape(Im2Col(x)), W), b)), 0, 3, 1, 2))"
	if isConv2d(n) {
		return c.conv2d(n, n, nil, activation{}) // without a bias or activation
	}
	r := children(n)[0]
	if n.Op().String() != "Aᵀ{0, 3, 1, 2}" || r.Op() == nil || opType(r.Op()) != "reshapeOp" {
		return value{}, c.refuse(n, why)
	}
	u, w, b, act, nc := c.affine(children(r)[0])
	if nc != nil {
		return value{}, nc
	}
	col := u
	if col.Op() != nil && opType(col.Op()) == "reshapeOp" {
		col = children(col)[0]
	}
	if col.Op() == nil || opType(col.Op()) != "im2colOp" {
		return value{}, c.refuse(n, why)
	}
	wn := c.m.g.Params[w]
	v, l, nc := c.unfold(n, col, wn.Shape()[1], act, w, b)
	if nc != nil {
		return v, nc
	}
	if u.Shape()[0] != v.shape.H*v.shape.W {
		return value{}, c.refuse(n, why)
	}
	v.layers = append(slices.Clone(v.layers), l)
	return v, nil
}

// dropout reads gorgonia's Dropout(x, p) as the built-in layer
// nn.Dropout of rate p: inverted dropout whose mask is keyed by the
// model's seed (from its name), the step, the example's position in the
// batch, the layer and the element, so each example's gradient depends
// on its own mask only. gorgonia keeps p unexported: it is read by
// reflection.
func (c *compiler) dropout(n *gorgonia.Node) (value, *notCompiled) {
	v, nc := c.node(children(n)[0])
	if nc != nil {
		return v, nc
	}
	f := reflect.ValueOf(n.Op())
	if f.Kind() == reflect.Pointer {
		f = f.Elem()
	}
	if f.Kind() != reflect.Struct {
		return value{}, c.refuse(n, "of an unknown layout")
	}
	pf := f.FieldByName("probability")
	if !pf.IsValid() || pf.Kind() != reflect.Float64 {
		return value{}, c.refuse(n, "of an unknown layout")
	}
	rate := pf.Float()
	if !(rate >= 0 && rate < 1) {
		return value{}, c.refuse(n, fmt.Sprintf("with probability %v: the built-in layer's rate is in [0, 1)", rate))
	}
	if d, ok := n.Op().(interface{ SetTraining(bool) error }); ok && !slices.Contains(c.m.drops, d) {
		c.m.drops = append(c.m.drops, d)
	}
	if rate == 0 {
		return v, nil
	}
	h := fnv.New64a()
	h.Write([]byte("gorgoniadp dropout " + c.m.name))
	v.layers = append(slices.Clone(v.layers), nn.Dropout{Rate: rate, Seed: h.Sum64()})
	return v, nil
}

// pool reads a MaxPool2D or AveragePool2D with a square window, stride
// equal to the window and no padding.
func (c *compiler) pool(n *gorgonia.Node) (value, *notCompiled) {
	kind := "MaxPool"
	if opType(n.Op()) == "avgPoolOp" {
		kind = "AvgPool"
	}
	var b, ch, h, w, kh, kw, ph, pw, sh, sw int
	if _, err := fmt.Sscanf(n.Op().String(), kind+"{%d, %d, %d, %d}(kernel: (%d, %d), pad: (%d, %d), stride: (%d, %d))", &b, &ch, &h, &w, &kh, &kw, &ph, &pw, &sh, &sw); err != nil {
		return value{}, c.refuse(n, "")
	}
	if kh != kw || sh != kh || sw != kw || ph != 0 || pw != 0 {
		return value{}, c.refuse(n, fmt.Sprintf("with kernel (%d, %d), pad (%d, %d), stride (%d, %d): the built-in pooling has a square window, stride equal to the window, no padding", kh, kw, ph, pw, sh, sw))
	}
	v, nc := c.node(children(n)[0])
	if nc != nil {
		return v, nc
	}
	var l nn.Layer = nn.MaxPool{Size: kh}
	if kind == "AvgPool" {
		// gorgonia averages otherwise than over the whole windows when
		// they do not tile the activation (the losses differ).
		if v.shape.H%kh != 0 || v.shape.W%kh != 0 {
			return value{}, c.refuse(n, fmt.Sprintf("of %dx%d windows on a %dx%d activation: the built-in average pooling needs windows that tile it", kh, kh, v.shape.H, v.shape.W))
		}
		l = nn.AvgPool{Size: kh}
	}
	out, err := nn.OutShape(l, v.shape)
	if s := n.Shape(); err != nil || len(s) != 4 || s[1] != out.C || s[2] != out.H || s[3] != out.W {
		return value{}, c.refuse(n, fmt.Sprintf("on a %dx%dx%d activation", v.shape.C, v.shape.H, v.shape.W))
	}
	v.layers = append(slices.Clone(v.layers), l)
	v.shape = out
	return v, nil
}

// crossEntropy reads a graph's own loss as the cross-entropy
// Neg(Sum(HadamardProd(Label, LogSoftMax(z)))) of the logits and returns
// the node the cross-entropy is of.
func (c *compiler) crossEntropy(loss *gorgonia.Node) (*gorgonia.Node, *notCompiled) {
	why := "the loss is not the cross-entropy Neg(Sum(HadamardProd(Label, LogSoftMax(Logits))))"
	n := loss
	if !isUnary(n.Op(), "neg") {
		return nil, &notCompiled{op: "Loss", node: oneLine(loss.Name()), why: why}
	}
	n = children(n)[0]
	if n.Op() == nil || opType(n.Op()) != "sumOp" || !n.IsScalar() {
		return nil, &notCompiled{op: "Loss", node: oneLine(loss.Name()), why: why}
	}
	n = children(n)[0]
	if !isBinary(n.Op(), "⊙") {
		return nil, &notCompiled{op: "Loss", node: oneLine(loss.Name()), why: why}
	}
	l, r := children(n)[0], children(n)[1]
	if l != c.m.g.Label {
		l, r = r, l
	}
	if l != c.m.g.Label || !isLogSoftMax(r) {
		return nil, &notCompiled{op: "Loss", node: oneLine(loss.Name()), why: why}
	}
	// The logits are the log-softmax's input, or the log-softmax itself.
	if z := children(r)[0]; z == c.m.g.Logits {
		return z, nil
	}
	if r == c.m.g.Logits {
		return r, nil
	}
	return nil, &notCompiled{op: "Loss", node: oneLine(loss.Name()), why: "the cross-entropy is not of the Logits node"}
}

// isConv2d says whether n is the output of gorgonia's Conv2d: the
// product of the unfolded input by the transposed kernel, reshaped and
// transposed.
func isConv2d(n *gorgonia.Node) bool {
	if n.Op() == nil || opType(n.Op()) != "transposeOp" {
		return false
	}
	r := children(n)[0]
	if r.Op() == nil || opType(r.Op()) != "reshapeOp" {
		return false
	}
	p := children(r)[0]
	return p.Op() != nil && opType(p.Op()) == "linAlgBinOp" && p.Op().String() == "A × Bᵀ"
}

// isLogSoftMax says whether n is LogSoftMax along its last axis.
func isLogSoftMax(n *gorgonia.Node) bool {
	if n.Op() == nil || opType(n.Op()) != "softmaxOp" {
		return false
	}
	var axis int
	var log bool
	if _, err := fmt.Sscanf(n.Op().String(), "Softmax{%d, %t}()", &axis, &log); err != nil {
		return false
	}
	d := n.Shape().Dims()
	return log && (axis == -1 || axis == d-1)
}

func isUnary(op gorgonia.Op, d string) bool {
	return op != nil && opType(op) == "elemUnaryOp" && description("elemUnaryOp", op) == d
}

func isBinary(op gorgonia.Op, d string) bool {
	return op != nil && opType(op) == "elemBinOp" && description("elemBinOp", op) == d
}

func isProduct(n *gorgonia.Node) bool {
	return n.Op() != nil && opType(n.Op()) == "linAlgBinOp" && n.Op().String() == "A × B"
}

// rectified reads n as Rectify(x) = HadamardProd(x, Gte(x, 0)) and
// returns x.
func rectified(n *gorgonia.Node) (*gorgonia.Node, bool) {
	ch := children(n)
	x, cmp := ch[0], ch[1]
	if !isBinary(cmp.Op(), ">=") {
		return nil, false
	}
	cc := children(cmp)
	if cc[0] != x || !cc[1].IsScalar() {
		return nil, false
	}
	z, err := float32s(cc[1].Value())
	if err != nil || len(z) != 1 || z[0] != 0 {
		return nil, false
	}
	return x, true
}

// apiNames are the gorgonia functions that make each op.
var apiNames = map[string]string{
	"linAlgBinOp":         "Mul",
	"im2colOp":            "Im2Col",
	"maxPoolOp":           "MaxPool2D",
	"avgPoolOp":           "AveragePool2D",
	"reshapeOp":           "Reshape",
	"transposeOp":         "Transpose",
	"repeatOp":            "Broadcast",
	"sizeOp":              "SizeOf (Mean)",
	"sumOp":               "Sum",
	"concatOp":            "Concat",
	"sliceOp":             "Slice",
	"constantScalar":      "a constant",
	"BatchNormOp":         "BatchNorm",
	"dropoutOp":           "Dropout",
	"batchnormDiffOp":     "BatchNorm",
	"randomOp":            "a random node (UniformRandomNode, GaussianRandomNode)",
	"maxOp":               "Max",
	"globalAveragePoolOp": "GlobalAveragePool2D",
	"argmaxOp":            "Argmax",
	"^":                   "Pow",
	"<":                   "Lt",
	">":                   "Gt",
	"<=":                  "Lte",
	"==":                  "Eq",
	"!=":                  "Ne",
	"sign":                "Sign",
	"ceil":                "Ceil",
	"floor":               "Floor",
	"sin":                 "Sin",
	"cos":                 "Cos",
	"log2":                "Log2",
	"inv":                 "Inverse",
	"invSqrt":             "InverseSqrt",
	"cube":                "Cube",
	"log1p":               "Log1p",
	"expm1":               "Expm1",
	"+":                   "Add",
	"-":                   "Sub",
	"⊙":                   "HadamardProd",
	"÷":                   "HadamardDiv",
	">=":                  "Gte",
	"tanh":                "Tanh",
	"sigmoid":             "Sigmoid",
	"abs":                 "Abs",
	"sqrt":                "Sqrt",
	"ln":                  "Log",
	"exp":                 "Exp",
	"square":              "Square",
	"neg":                 "Neg",
	"softplus":            "SoftPlus",
}

// leakyLt is userOp's name of the comparison x < 0 in LeakyRelu.
const leakyLt = "LeakyRelu (its x < 0)"

// userOp names node n's op as the user wrote it: the gorgonia function,
// with LeakyRelu recognized by its comparison x < 0.
func userOp(n *gorgonia.Node) string {
	if isBinary(n.Op(), "<") {
		if ch := children(n); len(ch) == 2 && ch[1].IsScalar() {
			if z, err := float32s(ch[1].Value()); err == nil && len(z) == 1 && z[0] == 0 {
				return leakyLt
			}
		}
	}
	return apiName(n.Op())
}

// apiName is the name of the gorgonia function that makes op, as a user
// wrote it.
func apiName(op gorgonia.Op) string {
	t := opType(op)
	switch t {
	case "elemUnaryOp", "elemBinOp":
		if s, ok := apiNames[description(t, op)]; ok {
			return s
		}
	case "softmaxOp":
		if strings.Contains(op.String(), "true") {
			return "LogSoftMax"
		}
		return "SoftMax"
	case "linAlgBinOp":
		if op.String() == "A × Bᵀ" {
			return "Mul with a transposed operand (as in Conv2d)"
		}
	}
	if s, ok := apiNames[t]; ok {
		return s
	}
	return t
}

// children are n's arguments, in order.
func children(n *gorgonia.Node) []*gorgonia.Node {
	it := n.Graph().From(n.ID())
	out := make([]*gorgonia.Node, 0, it.Len())
	for it.Next() {
		out = append(out, it.Node().(*gorgonia.Node))
	}
	return out
}

// compile sets m.fast to the graph read as built-in layers, or m.why to
// the reason it cannot be. It refuses a graph with AveragePool2D that
// does not compile: gorgonia v0.9.18 computes AveragePool2D's gradient
// wrongly (it disagrees with central differences in most entries,
// TestAveragePool2D), so the per-example path cannot train it.
func (m *Model) compile(userLoss bool) error {
	c, nc := compileGraph(m, userLoss)
	if nc == nil {
		nc = m.probe(c)
	}
	if nc == nil {
		m.fast = c
		return nil
	}
	m.why = nc.Error()
	for _, n := range m.g.Input.Graph().SubgraphRoots(m.g.Loss).AllNodes() {
		if n.Op() != nil && opType(n.Op()) == "avgPoolOp" {
			return &OpError{Node: oneLine(n.Name()), Op: "AveragePool2D", Reason: "has a wrong gradient in gorgonia (it disagrees with finite differences), so it trains only in a graph that compiles to the built-in layers, and this one does not: " + nc.Error()}
		}
		if n.Op() != nil && opType(n.Op()) == "dropoutOp" {
			return &OpError{Node: oneLine(n.Name()), Op: "Dropout", Reason: "draws random numbers in gorgonia that are not keyed per example, so it trains only in a graph that compiles to the built-in layers (whose dropout is), and this one does not: " + nc.Error()}
		}
	}
	return nil
}

// probe checks the compiled layers against the graph on one example
// drawn from a fixed seed: the cross-entropy for up to 16 labels, from
// gorgonia's forward pass and from the executor's, must agree to 1e-3
// relative. A misread pattern (which the tests of every pattern should
// have caught) then leaves the graph on the per-example path.
func (m *Model) probe(c *compiled) *notCompiled {
	rng := rand.New(rand.NewPCG(0x6764706d66, uint64(len(m.flat))))
	x := make([]float32, len(m.x))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	lg, err := m.logits(x)
	if err != nil {
		return &notCompiled{op: "the graph", why: "running it on a probe example: " + err.Error()}
	}
	want := slices.Clone(lg)
	e, err := clip.New(c, clip.Options{NonPrivate: true, MaxBatch: 1})
	if err != nil {
		return &notCompiled{op: "the built-in layers", why: err.Error()}
	}
	c.pull()
	for k := range min(m.classes, 16) {
		got, _, err := e.Evaluate(x, []int{k})
		if err != nil {
			return &notCompiled{op: "the built-in layers", why: err.Error()}
		}
		w, _ := crossEntropyOf(want, k)
		if !(math.Abs(got-w) <= 1e-3*(1+math.Abs(w))) {
			return &notCompiled{op: "the built-in layers", why: fmt.Sprintf("disagree with the graph on a probe example (cross-entropy %v, the graph's %v): please report the graph", got, w)}
		}
	}
	return nil
}

// Compiled reports whether the model's engines run the graph on the
// batched executor of the built-in layers (package clip), and if not,
// why: the op (by the gorgonia function that makes it, e.g. SoftPlus) that
// keeps it on the per-example path, one gorgonia VM pass per example.
func (m *Model) Compiled() (ok bool, why string) {
	if m.fast != nil {
		return true, ""
	}
	return false, "gorgoniadp: " + m.name + " runs one gorgonia pass per example, not the batched executor: " + m.why
}

// fastEngine is an Engine's batched executor: sum computes clipped sums
// and evaluations, one (built on first use) single gradients.
type fastEngine struct {
	sum, one *clip.Engine
}

// newFast builds the batched engine of a compiled model (nil if it is not
// compiled).
func (m *Model) newFast(opt clip.Options) (*fastEngine, error) {
	if m.fast == nil {
		return nil, nil
	}
	e, err := clip.New(m.fast, opt)
	if err != nil {
		return nil, err
	}
	return &fastEngine{sum: e}, nil
}

// fastClippedSum is ClippedSumContext on the batched executor, for a
// checked batch: package clip's clipping rule, the same as the
// per-example path's.
func (e *Engine) fastClippedSum(ctx context.Context, x []float32, y []int, dst []float32) (clip.Stats, error) {
	e.m.fast.pull()
	st, err := e.fast.sum.ClippedSumContext(ctx, x, y, dst)
	if err != nil {
		return st, fmt.Errorf("gorgoniadp: clipped sum: %w", err)
	}
	e.m.fast.push(dst)
	return st, nil
}

// fastGradient is Gradient on the batched executor: the unclipped sum of
// a batch of one. An example whose loss or gradient is not finite gets a
// NaN loss and a zero gradient.
func (e *Engine) fastGradient(x []float32, y int, dst []float32) (float64, error) {
	if e.fast.one == nil {
		one, err := clip.New(e.m.fast, clip.Options{NonPrivate: true, MaxBatch: 1})
		if err != nil {
			return 0, fmt.Errorf("gorgoniadp: gradient: %w", err)
		}
		e.fast.one = one
	}
	e.m.fast.pull()
	st, err := e.fast.one.ClippedSum(x, []int{y}, dst)
	if err != nil {
		return 0, fmt.Errorf("gorgoniadp: gradient: %w", err)
	}
	e.m.fast.push(dst)
	if st.NonFinite > 0 {
		return math.NaN(), nil
	}
	return st.Loss, nil
}

// fastEvaluate is EvaluateContext on the batched executor.
func (e *Engine) fastEvaluate(ctx context.Context, x []float32, y []int) (loss, acc float64, err error) {
	e.m.fast.pull()
	loss, acc, err = e.fast.sum.EvaluateContext(ctx, x, y)
	if err != nil {
		return 0, 0, fmt.Errorf("gorgoniadp: evaluate: %w", err)
	}
	return loss, acc, nil
}
