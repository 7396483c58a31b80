package toeplitz_test

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// ExampleOptimize optimizes a 2-buffer BLT for 1000 steps of prefix
// sums under min-sep participation (each example at most 5 times, 100 steps
// apart) and scores it against the Toeplitz square root. The sensitivity
// also holds for an unbounded stream (StreamSensitivity). Package noise
// streams its noise with 2 buffers (noise.NewToeplitz).
func ExampleOptimize() {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(1000)
	schema, _ := dpcore.MinSepParticipation(5, 100)
	blt, _, err := toeplitz.Optimize(ctx, toeplitz.Problem{Workload: w, Schema: schema, Buffers: 2}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	loss, sens, _ := blt.Loss(w, schema)
	sq, _ := toeplitz.Sqrt(1000)
	sqLoss, _, _ := sq.Loss(w, schema)
	stream, _ := blt.StreamSensitivity(schema)
	fmt.Printf("%s: sensitivity exact %v (%s), loss %.3g of the square root's\n", blt.Name, sens.Exact, sens.Method, loss/sqLoss)
	fmt.Printf("unbounded-stream sensitivity >= %d-step: %v\n", w.N, stream.Value >= sens.Value)
	// Output:
	// blt:2: sensitivity exact true (toeplitz-packed), loss 0.716 of the square root's
	// unbounded-stream sensitivity >= 1000-step: true
}
