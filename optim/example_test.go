package optim_test

import (
	"errors"
	"fmt"

	"github.com/dpmf-go/dpmf/optim"
)

// Heavy-ball momentum with the papers' schedule: rate 0.5, cooled down over
// the last 25% of the steps.
func ExampleNewMomentum() {
	const dim, steps = 2, 8
	o, err := optim.NewMomentum(dim, 0.9, optim.CooldownFraction(0.5, steps, 0.25), steps, optim.MomentumOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	params := []float32{1, -1}
	for i := 0; i < steps; i++ {
		if err := o.Step(params, []float32{0.1, -0.1}); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Printf("after %d steps: %.4f\n", o.StepIndex(), params)
	// Output: after 8 steps: [-0.1666 0.1666]
}

// The workload is what a correlated-noise mechanism must be factorized for:
// theta_i = theta_0 - (A G)_i.
func ExampleMomentum_Workload() {
	o, _ := optim.NewMomentum(1, 0.5, optim.Constant(0.1), 4, optim.MomentumOptions{})
	w, _ := o.Workload(4)
	a, _ := w.Matrix()
	fmt.Println(w)
	for i := 0; i < 4; i++ {
		fmt.Printf("%.4f\n", a.RawRowView(i))
	}

	// Nesterov is linear in G but not an mfnoise workload family.
	n, _ := optim.NewMomentum(1, 0.5, optim.Constant(0.1), 4, optim.MomentumOptions{Nesterov: true})
	_, err := n.Workload(4)
	fmt.Println(errors.Is(err, optim.ErrUnsupportedWorkload))
	// Output:
	// momentum(n=4,beta=0.5)
	// [0.1000 0.0000 0.0000 0.0000]
	// [0.1500 0.1000 0.0000 0.0000]
	// [0.1750 0.1500 0.1000 0.0000]
	// [0.1875 0.1750 0.1500 0.1000]
	// true
}
