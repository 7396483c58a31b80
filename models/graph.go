package models

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Build implements Model.
func (m *seq) Build(g *gorgonia.ExprGraph, batch int) (*Net, error) {
	if batch <= 0 {
		return nil, dpcore.Invalidf("models: %s: build: batch %d", m.name, batch)
	}
	net, err := m.build(g, batch)
	if err != nil {
		return nil, fmt.Errorf("models: %s: build: %w", m.name, err)
	}
	return net, nil
}

func (m *seq) paramNode(g *gorgonia.ExprGraph, p ParamInfo) *gorgonia.Node {
	back := m.params[p.Offset : p.Offset+p.Len : p.Offset+p.Len]
	t := tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(back))
	if len(p.Shape) == 1 {
		return gorgonia.NewVector(g, tensor.Float32, gorgonia.WithShape(p.Shape...), gorgonia.WithName(p.Name), gorgonia.WithValue(t))
	}
	return gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(p.Shape...), gorgonia.WithName(p.Name), gorgonia.WithValue(t))
}

func (m *seq) build(g *gorgonia.ExprGraph, batch int) (*Net, error) {
	c, h, w := m.in[0], m.in[1], m.in[2]
	x := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(batch, c, h, w), gorgonia.WithName("x"))
	net := &Net{Batch: batch, Input: x}
	cur := x // (batch, c, h, w) while convolving, (batch, d) after
	var err error
	param := func(p nn.Param) ParamInfo {
		for _, q := range m.layout {
			if q.Offset == p.Offset && q.Len == p.Len {
				return q
			}
		}
		return ParamInfo{}
	}
	for i, layer := range m.layers {
		var wp, bp nn.Param
		var act nn.Activation
		conv := false
		switch l := layer.(type) {
		case nn.MaxPool:
			if cur, err = gorgonia.MaxPool2D(cur, tensor.Shape{l.Size, l.Size}, []int{0, 0}, []int{l.Size, l.Size}); err != nil {
				return nil, fmt.Errorf("layer %d maxpool: %w", i, err)
			}
			h, w = h/l.Size, w/l.Size
			continue
		case nn.Flatten:
			if cur, err = gorgonia.Reshape(cur, tensor.Shape{batch, c * h * w}); err != nil {
				return nil, fmt.Errorf("layer %d flatten: %w", i, err)
			}
			c, h, w = c*h*w, 1, 1
			continue
		case nn.Conv2D:
			wp, bp, act, conv = l.Weight, l.Bias, l.Act, true
		case nn.Dense:
			wp, bp, act = l.Weight, l.Bias, l.Act
		default:
			// The engine (package nn) runs every layer; the gorgonia
			// graph covers the layers of the library's fixed models.
			return nil, dpcore.Invalidf("layer %d: %T has no gorgonia graph here (the engine runs it through Network)", i, layer)
		}
		wi, bi := param(wp), param(bp)
		W, B := m.paramNode(g, wi), m.paramNode(g, bi)
		fanIn, fanOut := wi.Shape[0], wi.Shape[1]
		L := Layer{Name: fmt.Sprintf("layer%d", len(net.Layers)), Conv: conv, FanIn: fanIn, FanOut: fanOut, Weight: wi, Bias: bi, Positions: 1}
		if conv {
			l := layer.(nn.Conv2D)
			col, err := gorgonia.Im2Col(cur, tensor.Shape{l.Kernel, l.Kernel}, tensor.Shape{l.Pad, l.Pad}, tensor.Shape{l.Stride, l.Stride}, tensor.Shape{1, 1})
			if err != nil {
				return nil, fmt.Errorf("layer %d im2col: %w", i, err)
			}
			h = (h+2*l.Pad-l.Kernel)/l.Stride + 1
			w = (w+2*l.Pad-l.Kernel)/l.Stride + 1
			L.Positions = h * w
			if L.In, err = gorgonia.Reshape(col, tensor.Shape{batch * h * w, fanIn}); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
		} else {
			L.In = cur
		}
		mm, err := gorgonia.Mul(L.In, W)
		if err != nil {
			return nil, fmt.Errorf("layer %d matmul: %w", i, err)
		}
		z, err := gorgonia.BroadcastAdd(mm, B, nil, []byte{0})
		if err != nil {
			return nil, fmt.Errorf("layer %d bias: %w", i, err)
		}
		rows := batch * L.Positions
		zero := tensor.New(tensor.WithShape(rows, fanOut), tensor.Of(tensor.Float32))
		L.Probe = gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(rows, fanOut),
			gorgonia.WithName(fmt.Sprintf("probe%d", len(net.Layers))), gorgonia.WithValue(zero))
		if L.Out, err = gorgonia.Add(z, L.Probe); err != nil {
			return nil, fmt.Errorf("layer %d probe: %w", i, err)
		}
		net.Layers = append(net.Layers, L)
		a := L.Out
		switch act {
		case nn.Tanh:
			a, err = gorgonia.Tanh(a)
		case nn.ReLU:
			a, err = gorgonia.Rectify(a)
		case nn.Identity:
		default:
			return nil, dpcore.Invalidf("layer %d: activation %v has no gorgonia graph here", i, act)
		}
		if err != nil {
			return nil, fmt.Errorf("layer %d activation: %w", i, err)
		}
		if conv {
			// Back to (batch, channels, h, w) for the next im2col / pool.
			if a, err = gorgonia.Reshape(a, tensor.Shape{batch, h, w, fanOut}); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
			if a, err = gorgonia.Transpose(a, 0, 3, 1, 2); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
			c = fanOut
		} else {
			c = fanOut
		}
		cur = a
	}
	net.Logits = cur
	return net, nil
}
