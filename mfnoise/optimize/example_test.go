package optimize_test

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// Minimize a convex quadratic with a known lower bound (0): the run stops
// at Converged once the certified gap is below Settings.Gap.
func ExampleMinimize() {
	p := optimize.Problem{
		Func: func(x, g []float64) float64 {
			f := 0.0
			for i, v := range x {
				w := float64(i + 1)
				f += w * (v - 2) * (v - 2)
				if g != nil {
					g[i] = 2 * w * (v - 2)
				}
			}
			return f + 1
		},
		Bound:      func(context.Context) (float64, error) { return 1, nil },
		BoundEvery: 1,
	}
	res, err := optimize.Minimize(context.Background(), p, make([]float64, 4), &optimize.Settings{Gap: 1e-6}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%v: loss %.6f, gap <= 1e-6: %v\n", res.Status, res.Loss, res.Gap <= 1e-6)
	// Output:
	// converged: loss 1.000000, gap <= 1e-6: true
}
