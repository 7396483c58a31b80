package sampler_test

import (
	"fmt"

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
