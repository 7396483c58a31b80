package sampler_test

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/sampler"
)

// The banded-MF paper's worked example (Sec. 1): CIFAR-10, m = 50000,
// B = 500, n = 2000 steps. DP-SGD would compose 2000 mechanisms at q = 0.01;
// b = 10 partitions give 200 compositions at q = 0.1.
func ExampleNewBandPoisson() {
	s, err := sampler.NewBandPoisson(50000, 500, 10, 2000, false, sampler.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	a := s.Accounting()
	fmt.Println("schema:", s.Schema())
	fmt.Printf("accounting: %s, q = %g, %d compositions, up to %d bands\n", a.Kind, a.Q, a.Compositions, a.Bands)
	fmt.Println("divide the noisy sum by", s.ExpectedBatch())

	batch, err := s.Next(nil) // examples of step 1, increasing
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("step 1 drew from one partition of", 50000/10, "examples:", len(batch) < 5000)
	// Output:
	// schema: minsep(k=200,b=10)
	// accounting: band-poisson, q = 0.1, 200 compositions, up to 10 bands
	// divide the noisy sum by 500
	// step 1 drew from one partition of 5000 examples: true
}

// Random allocation: every epoch of t = m/B = 4 steps puts each example in
// exactly one step; batch sizes vary around m/t.
func ExampleNewRandomAllocation() {
	var seed [32]byte // a fixed seed for the example; leave Seed nil in a run
	s, err := sampler.NewRandomAllocation(40, 10, 8, sampler.Options{Seed: (*dpcore.Seed)(&seed)})
	if err != nil {
		fmt.Println(err)
		return
	}
	a := s.Accounting()
	fmt.Printf("accounting: %s over t = %d steps, %d epochs\n", a.Kind, a.AllocationSize, a.Compositions)
	fmt.Println("schema:", s.Schema(), "expected batch:", s.ExpectedBatch())
	total := 0
	for range 4 { // one epoch
		b, _ := s.Next(nil)
		total += len(b)
	}
	fmt.Println("examples in the first epoch:", total)
	// Output:
	// accounting: random-allocation over t = 4 steps, 2 epochs
	// schema: minsep(k=2,b=1) expected batch: 10
	// examples in the first epoch: 40
}
