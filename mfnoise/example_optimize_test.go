package mfnoise_test

import (
	"context"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// ExampleOptimize finds the optimal single-participation factorization of
// 256 steps of prefix sums, certified within 1e-4 of the optimum, and the
// best 2-buffer BLT encoder (O(1) noise memory per coordinate, not O(n))
// through the same door.
func ExampleOptimize() {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(256)
	single, err := mfnoise.Optimize(ctx, mfnoise.Problem{Workload: w, Family: mfnoise.SingleFamily{}}, &optimize.Settings{Gap: 1e-4})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("mf-single: sqrt(loss) = %.1f, gap <= 1e-4: %v\n", math.Sqrt(single.Loss), single.Gap <= 1e-4)
	blt, err := mfnoise.Optimize(ctx, mfnoise.Problem{Workload: w, Family: mfnoise.BLTFamily{Buffers: 2}}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: loss %.3f x mf-single's\n", blt.Toeplitz.Name, blt.Loss/single.Loss)
	// Output:
	// mf-single: sqrt(loss) = 40.4, gap <= 1e-4: true
	// blt:2: loss 1.079 x mf-single's
}
