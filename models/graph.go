package models

import (
	"fmt"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Build implements Model.
func (m *seq) Build(g *gorgonia.ExprGraph, batch int) (*Net, error) {
	if batch <= 0 {
		return nil, fmt.Errorf("models: %s: build: batch %d: %w", m.name, batch, ErrInvalid)
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
	flat := false
	var err error
	for i, s := range m.specs {
		wi, bi := m.layout[2*i], m.layout[2*i+1]
		W, B := m.paramNode(g, wi), m.paramNode(g, bi)
		L := Layer{Name: fmt.Sprintf("layer%d", i), Conv: s.conv, FanIn: s.fanIn, FanOut: s.fanOut, Weight: wi, Bias: bi, Positions: 1}
		if s.conv {
			col, err := gorgonia.Im2Col(cur, tensor.Shape{3, 3}, tensor.Shape{1, 1}, tensor.Shape{1, 1}, tensor.Shape{1, 1})
			if err != nil {
				return nil, fmt.Errorf("layer %d im2col: %w", i, err)
			}
			L.Positions = h * w
			if L.In, err = gorgonia.Reshape(col, tensor.Shape{batch * h * w, s.fanIn}); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
		} else {
			if !flat {
				if cur, err = gorgonia.Reshape(cur, tensor.Shape{batch, c * h * w}); err != nil {
					return nil, fmt.Errorf("layer %d flatten: %w", i, err)
				}
				flat = true
			}
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
		zero := tensor.New(tensor.WithShape(rows, s.fanOut), tensor.Of(tensor.Float32))
		L.Probe = gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(rows, s.fanOut),
			gorgonia.WithName(fmt.Sprintf("probe%d", i)), gorgonia.WithValue(zero))
		if L.Out, err = gorgonia.Add(z, L.Probe); err != nil {
			return nil, fmt.Errorf("layer %d probe: %w", i, err)
		}
		net.Layers = append(net.Layers, L)
		a := L.Out
		switch s.act {
		case "tanh":
			a, err = gorgonia.Tanh(a)
		case "relu":
			a, err = gorgonia.Rectify(a)
		}
		if err != nil {
			return nil, fmt.Errorf("layer %d activation: %w", i, err)
		}
		if s.conv {
			// Back to (batch, channels, h, w) for the next im2col / pool.
			if a, err = gorgonia.Reshape(a, tensor.Shape{batch, h, w, s.fanOut}); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
			if a, err = gorgonia.Transpose(a, 0, 3, 1, 2); err != nil {
				return nil, fmt.Errorf("layer %d: %w", i, err)
			}
			c = s.fanOut
			if s.pool {
				if a, err = gorgonia.MaxPool2D(a, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}); err != nil {
					return nil, fmt.Errorf("layer %d maxpool: %w", i, err)
				}
				h, w = h/2, w/2
			}
		}
		cur = a
	}
	net.Logits = cur
	return net, nil
}
