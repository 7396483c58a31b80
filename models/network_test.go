package models

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/nn"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestNetworkMatchesBuild checks that the two descriptions of each model,
// the nn layer list the engine runs and the gorgonia graph of Build,
// compute the same logits from the same parameters.
func TestNetworkMatchesBuild(t *testing.T) {
	mk := []func() (Model, error){
		func() (Model, error) { return NewLogistic([3]int{1, 4, 4}, 3, 1) },
		func() (Model, error) { return NewMLP([3]int{2, 3, 3}, []int{7, 5}, 4, "tanh", 2) },
		func() (Model, error) { return NewMLP([3]int{1, 4, 4}, []int{6}, 3, "relu", 3) },
		func() (Model, error) { return NewCIFARCNN([3]int{3, 10, 10}, 5, 4) },
	}
	for _, f := range mk {
		m, err := f()
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for _, p := range m.Layout() {
			if len(p.Shape) == 1 || m.Name() == "logistic" {
				for j := range p.Len {
					m.Params()[p.Offset+j] = float32(0.1 * rng.NormFloat64())
				}
			}
		}
		const batch = 3
		in := m.InputShape()
		chw := in[0] * in[1] * in[2]
		x := make([]float32, batch*chw)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		plan, err := nn.NewPlan(m.Network(), m.Params(), nn.Options{MaxBatch: batch})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, batch*m.Classes())
		if err := plan.Forward(x, got); err != nil {
			t.Fatal(err)
		}
		g := gorgonia.NewGraph()
		net, err := m.Build(g, batch)
		if err != nil {
			t.Fatal(err)
		}
		xt := tensor.New(tensor.WithShape(batch, in[0], in[1], in[2]), tensor.WithBacking(append([]float32(nil), x...)))
		if err := gorgonia.Let(net.Input, xt); err != nil {
			t.Fatal(err)
		}
		vm := gorgonia.NewTapeMachine(g)
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		want := net.Logits.Value().Data().([]float32)
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-5*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s: logit %d: nn %v, gorgonia %v", m.Name(), i, got[i], want[i])
			}
		}
		vm.Close()
	}
}
