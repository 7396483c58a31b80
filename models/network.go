package models

import "github.com/dpmf-go/dpmf/nn"

// Network implements Model: the layer list package nn plans and executes.
func (m *seq) Network() nn.Network {
	return nn.Network{Input: nn.Shape{C: m.in[0], H: m.in[1], W: m.in[2]}, Layers: m.layers}
}
