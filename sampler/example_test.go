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

func ExampleCheckCompatible() {
	fixed, _ := sampler.NewFixedOrder(50000, 500, 2000, sampler.Options{})
	kb, _ := dpcore.KBParticipation(20, 100)

	// A mechanism optimized for (k=20, b=100) matches fixed-order epochs,
	// accounted unamplified.
	fmt.Println(sampler.CheckCompatible(fixed, kb, 0, false))
	// Claiming amplification for fixed-order epochs is refused.
	fmt.Println(sampler.CheckCompatible(fixed, kb, 0, true))

	// Reshuffling each epoch breaks (k,b)-participation.
	shuffled, _ := sampler.NewShuffle(50000, 500, 2000, sampler.Options{})
	fmt.Println(sampler.CheckCompatible(shuffled, kb, 0, false))

	// Amplified banded MF needs no more bands than partitions.
	band, _ := sampler.NewBandPoisson(50000, 500, 10, 2000, false, sampler.Options{})
	ms, _ := dpcore.MinSepParticipation(200, 10)
	fmt.Println(sampler.CheckCompatible(band, ms, 10, true))
	fmt.Println(sampler.CheckCompatible(band, ms, 16, true))
	// Output:
	// <nil>
	// sampler: incompatible sampler and mechanism: fixed-order epochs(m=50000, B=500, n=2000) supports only unamplified accounting: fixed-order epochs have no sampling randomness to amplify
	// sampler: incompatible sampler and mechanism: shuffling(m=50000, B=500, n=2000) realizes minsep(k=20,b=1) over n = 2000 steps, which kb(k=20,b=100) does not contain: the mechanism's sensitivity would not cover this participation
	// <nil>
	// sampler: incompatible sampler and mechanism: partitioned band sampling(m=50000, B=500, bands=10, n=2000, fixedSize=false): the encoder has 16 bands but the sampler has 10 partitions; banded-MF Thm 4 needs bands <= partitions
}
