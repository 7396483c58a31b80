package models

import "github.com/dpmf-go/dpmf/nn"

// Network implements Model: the layer list package nn plans and executes.
func (m *seq) Network() nn.Network {
	net := nn.Network{Input: nn.Shape{C: m.in[0], H: m.in[1], W: m.in[2]}}
	flat := false
	for i, s := range m.specs {
		w, b := m.layout[2*i], m.layout[2*i+1]
		act := nn.Identity
		switch s.act {
		case "tanh":
			act = nn.Tanh
		case "relu":
			act = nn.ReLU
		}
		wp, bp := nn.Param{Offset: w.Offset, Len: w.Len}, nn.Param{Offset: b.Offset, Len: b.Len}
		if s.conv {
			net.Layers = append(net.Layers, nn.Conv2D{Out: s.fanOut, Kernel: 3, Stride: 1, Pad: 1, Act: act, Weight: wp, Bias: bp})
			if s.pool {
				net.Layers = append(net.Layers, nn.MaxPool{Size: 2})
			}
			continue
		}
		if !flat {
			net.Layers = append(net.Layers, nn.Flatten{})
			flat = true
		}
		net.Layers = append(net.Layers, nn.Dense{Out: s.fanOut, Act: act, Weight: wp, Bias: bp})
	}
	return net
}
