package nn

import (
	"math"
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
				t.Skip("this network has no im2col convolution with an input gradient: nothing to compare (the test fails if no network has one)")
			}
			some++
			samePlans(t, plans[0], plans[1], b, rng, n, shapes[len(shapes)-1].C)
		})
	}
	if some == 0 {
		t.Error("no test network has an im2col convolution with an input gradient")
	}
}

// TestCol2imRowsWRN: WRN-16-4's four 8x8 convolutions (2304 and 1152
// inputs) take the kernel-row input gradient by default, and the clipped
// sum, the per-example norms and the losses are the same bits as with
// the whole product and col2im.
func TestCol2imRowsWRN(t *testing.T) {
	if testing.Short() {
		t.Skip("WRN-16-4 plans take seconds: long mode only (TestCol2imRows covers the small networks)")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	net, params := wrnNet(16, rng)
	const n = 2
	x := randomInputs(rng, net.Input.Size(), n)
	y := []int{2, 9}
	var sums [2][]float32
	var sqs [2][][]float64
	var losses [2][]float64
	for k, rows := range []int8{0, -1} {
		p, err := NewPlan(net, params, Options{MaxBatch: n, Workers: 1, col2imRows: rows})
		if err != nil {
			t.Fatal(err)
		}
		split := 0
		for i := range p.stages {
			if p.col2imRows(&p.stages[i]) {
				split++
			}
		}
		if want := map[int8]int{0: 4, -1: 0}[rows]; split != want {
			t.Fatalf("col2imRows %d: %d convolutions a kernel row at a time, want %d", rows, split, want)
		}
		cl := &testClipper{sq: make([][]float64, n)}
		sums[k] = make([]float32, len(params))
		if losses[k], err = p.Step(x, y, sums[k], cl); err != nil {
			t.Fatal(err)
		}
		sqs[k] = cl.sq
	}
	sameBits(t, "clipped sum", sums[0], sums[1])
	for i := range n {
		for l, want := range sqs[1][i] {
			if got := sqs[0][i][l]; math.Float64bits(got) != math.Float64bits(want) {
				t.Errorf("example %d layer %d: squared norm %v, whole product %v", i, l, got, want)
			}
		}
	}
	for i := range n {
		if math.Float64bits(losses[0][i]) != math.Float64bits(losses[1][i]) {
			t.Errorf("example %d: loss %v, whole product %v", i, losses[0][i], losses[1][i])
		}
	}
}
