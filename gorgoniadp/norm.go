package gorgoniadp

import (
	"fmt"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// LayerNorm builds, from gorgonia ops, the layer norm of one example x
// (shape (1, D) or (1, C, H, W)) over all its features, with an
// element-wise affine: gamma ⊙ (x - mean) / Sqrt(var + eps) + beta, the
// variance biased (divided by the number of features), gamma and beta
// parameters of x's shape (so one value per feature, in x's row-major
// order, CHW). It is the built-in nn.LayerNorm, and a graph using it
// compiles to that layer (on the per-example path it is plain gorgonia
// ops, whose gradient TestNormMaps checks). eps must be positive.
func LayerNorm(x, gamma, beta *gorgonia.Node, eps float32) (*gorgonia.Node, error) {
	s := x.Shape()
	if len(s) < 2 || s[0] != 1 {
		return nil, dpcore.Invalidf("gorgoniadp: LayerNorm of shape %v: want (1, ...), one example", s)
	}
	if !gamma.Shape().Eq(s) || !beta.Shape().Eq(s) {
		// gorgonia v0.9.18's Reshape shares the parameter's data, and
		// its VM was seen to write into a reshaped gamma (the parameter's
		// value changed during a gradient pass).
		return nil, dpcore.Invalidf("gorgoniadp: LayerNorm of shape %v with gamma of shape %v, beta of shape %v: give both x's shape", s, gamma.Shape(), beta.Shape())
	}
	xh, err := normalize(x, 1, eps)
	if err != nil {
		return nil, err
	}
	y, err := gorgonia.HadamardProd(xh, gamma)
	if err == nil {
		y, err = gorgonia.Add(y, beta)
	}
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: LayerNorm: %w", err)
	}
	return y, nil
}

// GroupNorm builds, from gorgonia ops, the group norm (Wu and He 2018) of
// one example's feature map x (shape (1, C, H, W)): its C channels in
// groups consecutive groups, each normalized over its channels and
// pixels, (x - mean) / Sqrt(var + eps) with the biased variance, then the
// per-channel affine gamma[c] xhat + beta[c], gamma and beta parameters
// of C values (any shape of that size). It is the built-in nn.GroupNorm,
// and a graph using it compiles to that layer (on the per-example path it
// is plain gorgonia ops). eps must be positive.
func GroupNorm(x *gorgonia.Node, groups int, gamma, beta *gorgonia.Node, eps float32) (*gorgonia.Node, error) {
	s := x.Shape()
	if len(s) != 4 || s[0] != 1 {
		return nil, dpcore.Invalidf("gorgoniadp: GroupNorm of shape %v: want (1, C, H, W), one example's feature map", s)
	}
	C := s[1]
	if groups <= 0 || C%groups != 0 {
		return nil, dpcore.Invalidf("gorgoniadp: GroupNorm: %d groups do not divide %d channels", groups, C)
	}
	if gamma.Shape().TotalSize() != C || beta.Shape().TotalSize() != C {
		return nil, dpcore.Invalidf("gorgoniadp: GroupNorm of %d channels with gamma of shape %v, beta of shape %v: want %d values each", C, gamma.Shape(), beta.Shape(), C)
	}
	xh, err := normalize(x, groups, eps)
	if err != nil {
		return nil, err
	}
	perChannel := func(p *gorgonia.Node) (*gorgonia.Node, error) {
		if p.Shape().Eq(tensor.Shape{1, C, 1, 1}) {
			return p, nil
		}
		return gorgonia.Reshape(p, tensor.Shape{1, C, 1, 1})
	}
	g, err := perChannel(gamma)
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: GroupNorm: %w", err)
	}
	b, err := perChannel(beta)
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: GroupNorm: %w", err)
	}
	y, err := gorgonia.BroadcastHadamardProd(xh, g, nil, []byte{2, 3})
	if err == nil {
		y, err = gorgonia.BroadcastAdd(y, b, nil, []byte{2, 3})
	}
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: GroupNorm: %w", err)
	}
	return y, nil
}

// normalize is ((-mean) + x) ⊙ (1 / Sqrt(var + eps)) over groups
// consecutive chunks of x's features, in x's shape: x reshaped to
// (groups, m), the means over the last axis. gorgonia v0.9.18's Reshape
// shares its input's data while its VM takes the two for separate
// registers, so an op that writes into its first operand in place must
// not take a reshape as that operand when the data is read again: the
// centring adds -mean to x (Sub(x, mean) overwrote x, which a Tanh
// before the norm reads in its gradient), and the product by the inverse
// replaces a division (the product after the reshape back overwrote the
// division's output, which its gradient reads). Both came out with a
// wrong gradient (TestNormMaps).
func normalize(x *gorgonia.Node, groups int, eps float32) (*gorgonia.Node, error) {
	if !(eps > 0) {
		return nil, dpcore.Invalidf("gorgoniadp: norm with eps %v: want eps > 0", eps)
	}
	s := x.Shape()
	m := s.TotalSize() / groups
	var r, mu, d, v, sd, xh *gorgonia.Node
	r, err := x, error(nil)
	if !s.Eq(tensor.Shape{groups, m}) {
		r, err = gorgonia.Reshape(x, tensor.Shape{groups, m})
	}
	if err == nil {
		mu, err = gorgonia.Mean(r, 1)
	}
	if err == nil {
		mu, err = gorgonia.Neg(mu)
	}
	if err == nil {
		mu, err = gorgonia.Reshape(mu, tensor.Shape{groups, 1})
	}
	if err == nil {
		d, err = gorgonia.BroadcastAdd(mu, r, []byte{1}, nil)
	}
	if err == nil {
		v, err = gorgonia.Square(d)
	}
	if err == nil {
		v, err = gorgonia.Mean(v, 1)
	}
	if err == nil {
		sd, err = gorgonia.Add(v, gorgonia.NewConstant(eps))
	}
	if err == nil {
		sd, err = gorgonia.Sqrt(sd)
	}
	if err == nil {
		sd, err = gorgonia.HadamardDiv(gorgonia.NewConstant(float32(1)), sd)
	}
	if err == nil {
		sd, err = gorgonia.Reshape(sd, tensor.Shape{groups, 1})
	}
	if err == nil {
		xh, err = gorgonia.BroadcastHadamardProd(d, sd, nil, []byte{1})
	}
	if err == nil && !xh.Shape().Eq(s) {
		xh, err = gorgonia.Reshape(xh, s.Clone())
	}
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: norm: %w", err)
	}
	return xh, nil
}

// isNorm says whether n could be the affine output of a norm: Add of a
// HadamardProd and something, the product of something and a
// normalization (isNormalized).
func isNorm(n *gorgonia.Node) bool {
	if !isBinary(n.Op(), "+") {
		return false
	}
	for _, p := range children(n) {
		if !isBinary(p.Op(), "⊙") {
			continue
		}
		for _, q := range children(p) {
			if isNormalized(throughReshapes(q)) {
				return true
			}
		}
	}
	return false
}

// isNormalized says whether n could be a normalization: HadamardDiv or
// HadamardProd of a Sub or Add and something.
func isNormalized(n *gorgonia.Node) bool {
	if !isBinary(n.Op(), "÷") && !isBinary(n.Op(), "⊙") {
		return false
	}
	d := children(n)[0].Op()
	return isBinary(d, "-") || isBinary(d, "+")
}

// centred reads d as x - Mean(x) over x's last axis: Sub(x, M) or
// Add(N, x) (either order), M the mean and N its Neg broadcast along the
// last axis (groupStat), and returns x.
func (c *compiler) centred(d *gorgonia.Node) (*gorgonia.Node, bool) {
	ch := children(d)
	if isBinary(d.Op(), "-") {
		r := ch[0]
		return r, len(r.Shape()) >= 2 && c.meanOf(groupStat(ch[1], r), r)
	}
	if !isBinary(d.Op(), "+") {
		return nil, false
	}
	for _, o := range [][2]*gorgonia.Node{{ch[0], ch[1]}, {ch[1], ch[0]}} {
		r := o[1]
		if len(r.Shape()) < 2 {
			continue
		}
		if n := groupStat(o[0], r); isUnary(n.Op(), "neg") && c.meanOf(children(n)[0], r) {
			return r, true
		}
	}
	return nil, false
}

// throughReshapes follows Reshapes down from n.
func throughReshapes(n *gorgonia.Node) *gorgonia.Node {
	for n.Op() != nil && opType(n.Op()) == "reshapeOp" {
		n = children(n)[0]
	}
	return n
}

// norm reads act(Add(HadamardProd(xhat, gamma), beta)) (either order of
// each), xhat = Reshape(HadamardDiv(d, s)) or Reshape(HadamardProd(d,
// HadamardDiv(1, s))), s = Sqrt(Add(Mean(Square(d), -1), eps)), d =
// Sub(r, Mean(r, -1)), r = x or a Reshape of x, the means
// over r's last axis broadcast back along it: LayerNorm with gamma and
// beta of one value per feature (one group), or GroupNorm with one value
// per channel (groups dividing the channels). It is what LayerNorm and
// GroupNorm build; anything else (eps outside the Sqrt, an unbiased
// variance, a mean over other axes, ...) is refused.
func (c *compiler) norm(n, a *gorgonia.Node, act activation) (value, *notCompiled) {
	odd := func(why string) *notCompiled {
		return &notCompiled{op: "a norm", node: oneLine(a.Name()), why: why + " (gorgoniadp.LayerNorm and GroupNorm build the pattern that compiles)"}
	}
	ch := children(a)
	prod, beta := ch[0], ch[1]
	if !isBinary(prod.Op(), "⊙") {
		prod, beta = beta, prod
	}
	pc := children(prod)
	xh, gamma := pc[0], pc[1]
	if !isNormalized(throughReshapes(xh)) {
		xh, gamma = gamma, xh
	}
	div := throughReshapes(xh)
	if !isNormalized(div) {
		return value{}, odd("not (x - mean) / Sqrt(var + eps)")
	}
	d, den := children(div)[0], children(div)[1]
	inverse := isBinary(div.Op(), "⊙") // d ⊙ (1 / Sqrt(var + eps))
	r, ok := c.centred(d)
	if !ok {
		return value{}, odd("the numerator is not x - Mean(x) over the last axis")
	}
	last := len(r.Shape()) - 1
	sq := groupStat(den, r)
	if inverse {
		if !isBinary(sq.Op(), "÷") || !isConstScalar(children(sq)[0]) {
			return value{}, odd("not (x - mean) ⊙ (1 / Sqrt(var + eps))")
		}
		if one, err := float32s(children(sq)[0].Value()); err != nil || len(one) != 1 || one[0] != 1 {
			return value{}, odd("not (x - mean) ⊙ (1 / Sqrt(var + eps))")
		}
		sq = children(sq)[1]
	}
	if !isUnary(sq.Op(), "sqrt") {
		return value{}, odd("the denominator is not Sqrt(var + eps)")
	}
	add := children(sq)[0]
	if !isBinary(add.Op(), "+") {
		return value{}, odd("the denominator is not Sqrt(var + eps)")
	}
	vr, e := children(add)[0], children(add)[1]
	if isConstScalar(vr) {
		vr, e = e, vr
	}
	if !isConstScalar(e) {
		return value{}, odd("the denominator is not Sqrt(var + eps), eps a constant")
	}
	ev, err := float32s(e.Value())
	if err != nil || len(ev) != 1 {
		return value{}, odd("the denominator is not Sqrt(var + eps), eps a constant")
	}
	if !(ev[0] > 0) {
		return value{}, odd(fmt.Sprintf("with eps %v: the built-in layers' eps is positive", ev[0]))
	}
	sqd := meanArg(vr)
	if sqd == nil || !isUnary(sqd.Op(), "square") || children(sqd)[0] != d || !c.meanOf(vr, sqd) {
		return value{}, odd("var is not Mean(Square(x - mean)) over the last axis (the biased variance)")
	}
	// x, the norm's input, and the groups: r is x or a Reshape of it to
	// (..., groups, m) in row-major order, the groups consecutive chunks.
	x := r
	if r.Op() != nil && opType(r.Op()) == "reshapeOp" {
		x = children(r)[0]
	}
	total := x.Shape().TotalSize()
	m := r.Shape()[last]
	groups := total / m
	if !a.Shape().Eq(x.Shape()) || len(x.Shape()) < 2 || x.Shape()[0] != 1 {
		return value{}, odd(fmt.Sprintf("of shape %v to %v: the built-in norms keep one example's shape (1, ...)", x.Shape(), a.Shape()))
	}
	v, nc := c.node(x)
	if nc != nil {
		return v, nc
	}
	if v.shape.Size() != total || v.shape.C%groups != 0 {
		return value{}, odd(fmt.Sprintf("in %d groups of a %dx%dx%d activation: the built-in GroupNorm's groups are consecutive channels", groups, v.shape.C, v.shape.H, v.shape.W))
	}
	if act.act > nn.GELU {
		return value{}, &notCompiled{op: apiActName(act.act), node: oneLine(n.Name()), why: "after a norm: the built-in norms take Tanh, Rectify or none"}
	}
	var l nn.Layer
	// gamma and beta: one value per feature (LayerNorm, one group) or
	// per channel (GroupNorm).
	if throughReshapes(gamma).Op() == nil { // a parameter, maybe reshaped
		if groups != 1 && v.shape.H*v.shape.W > 1 {
			return value{}, odd(fmt.Sprintf("with an affine per feature in %d groups: the built-in LayerNorm has one group, GroupNorm an affine per channel", groups))
		}
		g, nc := c.elemParam(gamma, total, prod)
		if nc != nil {
			return value{}, nc
		}
		b, nc := c.elemParam(beta, total, a)
		if nc != nil {
			return value{}, nc
		}
		l = nn.LayerNorm{Eps: float64(ev[0]), Act: act.act, Weight: c.span(g), Bias: c.span(b)}
		if groups != 1 { // a 1x1 map: per feature is per channel
			l = nn.GroupNorm{Groups: groups, Eps: float64(ev[0]), Act: act.act, Weight: c.span(g), Bias: c.span(b)}
		}
	} else {
		if len(x.Shape()) != 4 {
			return value{}, odd("with an affine other than per feature or per channel")
		}
		g, nc := c.channelBias(gamma, v.shape.C)
		if nc != nil {
			return value{}, nc
		}
		b, nc := c.channelBias(beta, v.shape.C)
		if nc != nil {
			return value{}, nc
		}
		l = nn.GroupNorm{Groups: groups, Eps: float64(ev[0]), Act: act.act, Weight: c.span(g), Bias: c.span(b)}
	}
	v.layers = append(v.layers[:len(v.layers):len(v.layers)], l)
	return v, nil
}

// apiActName names an activation as gorgonia's API does.
func apiActName(a nn.Activation) string {
	switch a {
	case nn.Sigmoid:
		return "Sigmoid"
	case nn.LeakyReLU:
		return "LeakyRelu"
	}
	return strings.ToUpper(a.String()[:1]) + a.String()[1:]
}

// groupStat follows n, a per-group statistic broadcast to r's shape,
// down to the statistic: Repeats along r's last axis over Reshapes, the
// shape below the repeats r's with the last axis 1 (so that every
// feature of a group meets its group's value). It returns n's start if
// the chain is not so.
func groupStat(n, r *gorgonia.Node) *gorgonia.Node {
	rs := r.Shape()
	last := len(rs) - 1
	top := n
	for n.Op() != nil && opType(n.Op()) == "repeatOp" {
		if n.Op().String() != fmt.Sprintf("Repeat%d", last) {
			return top
		}
		n = children(n)[0]
	}
	s := n.Shape()
	if len(s) != len(rs) || s[last] != 1 || !slicesEq(s[:last], rs[:last]) {
		return top
	}
	return throughReshapes(n)
}

func slicesEq(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// meanArg is a's argument if n is gorgonia's Mean(a, axis) (Sum(a,
// axis) ÷ SizeOf(axis, a)), else nil.
func meanArg(n *gorgonia.Node) *gorgonia.Node {
	if !isBinary(n.Op(), "÷") {
		return nil
	}
	s, z := children(n)[0], children(n)[1]
	if s.Op() == nil || opType(s.Op()) != "sumOp" || z.Op() == nil || opType(z.Op()) != "sizeOp" {
		return nil
	}
	a := children(s)[0]
	if children(z)[0] != a {
		return nil
	}
	return a
}

// meanOf says whether n is Mean(r, last axis of r).
func (c *compiler) meanOf(n, r *gorgonia.Node) bool {
	if meanArg(n) != r {
		return false
	}
	rs := r.Shape()
	last := len(rs) - 1
	s := children(n)[0]
	z := children(n)[1]
	return s.Op().String() == fmt.Sprintf("Σ[%d]", last) && z.Op().String() == fmt.Sprintf("SizeOf=%d", rs[last])
}

// isConstScalar says whether n is a scalar constant.
func isConstScalar(n *gorgonia.Node) bool {
	return n.IsScalar() && n.Op() != nil && opType(n.Op()) == "constantScalar"
}

// elemParam reads n as a parameter of size values, maybe reshaped.
func (c *compiler) elemParam(n *gorgonia.Node, size int, user *gorgonia.Node) (int, *notCompiled) {
	p := throughReshapes(n)
	if p.Shape().TotalSize() != size {
		return 0, c.refuse(user, fmt.Sprintf("of a norm's affine parameter of %d values for %d features", p.Shape().TotalSize(), size))
	}
	return c.param(p, user)
}
