package nn

import (
	"math/rand/v2"
	"testing"
)

// TestCol2imRows: im2col convolutions computing their input gradient a
// kernel row at a time (Options.col2imRows) give the per-example
// gradients, losses and sums of the whole product and col2im bit for bit,
// on every test network with such a convolution and on examples with
// non-finite values.
func TestCol2imRows(t *testing.T) {
	some := 0
	for name, b := range testNets() {
		t.Run(name, func(t *testing.T) {
			const n = 5
			rng := rand.New(rand.NewPCG(37, uint64(len(name))))
			params := randParams(rng, b.n)
			shapes, err := b.net.Shapes()
			if err != nil {
				t.Fatal(err)
			}
			var plans [2]*Plan
			for k, rows := range []int8{1, -1} {
				if plans[k], err = NewPlan(b.net, params, Options{MaxBatch: n, Workers: 2, Chunk: 2, col2imRows: rows}); err != nil {
					t.Fatal(err)
				}
			}
			found := 0
			for i := range plans[0].stages {
				if s := &plans[0].stages[i]; plans[0].col2imRows(s) {
					found++
					if plans[1].col2imRows(&plans[1].stages[i]) {
						t.Fatal("col2imRows -1 still splits")
					}
				}
			}
			if found == 0 {
				t.Skip("no im2col convolution with an input gradient")
			}
			some++
			samePlans(t, plans[0], plans[1], b, rng, n, shapes[len(shapes)-1].C)
		})
	}
	if some == 0 {
		t.Error("no test network has an im2col convolution with an input gradient")
	}
}
