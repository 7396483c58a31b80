package audit_test

import (
	"crypto/sha256"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/audit"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/privacy"
)

// A service releases a noisy sum of d-dimensional contributions every step,
// with Gaussian noise of standard deviation sigma * zeta; every user joins
// every tenth step, and the batches are public. It audits its own loop with
// white-box canaries: Add puts the IN canaries' contributions into the sum
// before noise, Observe records the released sum.
func ExampleWhitebox() {
	const (
		canaries, steps, dim = 1000, 40, 1024
		zeta, delta          = 1.0, 1e-5
		every                = 10 // each user joins steps 1, 11, 21, 31
	)
	// Claim: one Gaussian mechanism with sensitivity zeta*sqrt(4).
	sigmaStep, _ := privacy.GaussianSigma(2, delta)
	sigma := sigmaStep * math.Sqrt(steps/every)
	claimed, _ := privacy.GaussianEpsilon(sigma/math.Sqrt(steps/every), delta)

	run := func(noiseScale float64) audit.Result {
		seed := sha256.Sum256([]byte("example"))
		wb, err := audit.NewWhitebox(audit.WhiteboxConfig{
			Canaries: canaries, Dim: dim, Steps: steps, ClipNorm: zeta, NoiseStd: sigma * zeta,
			Seed: (*dpcore.Seed)(&seed), // reproducible here; nil (crypto/rand) in a real audit
		})
		if err != nil {
			panic(err)
		}
		noise, _ := noise.NewIndependent(steps, dim, noise.Options{Seed: (*dpcore.Seed)(&seed)})
		sum, z := make([]float32, dim), make([]float32, dim)
		all := make([]int, canaries)
		for j := range all {
			all[j] = j
		}
		for step := 1; step <= steps; step++ {
			clear(sum) // the service's own (clean) contributions would go here
			var joined []int
			if (step-1)%every == 0 {
				joined = all
			}
			if err := wb.Add(step, joined, sum); err != nil {
				panic(err)
			}
			_ = noise.Next(z)
			for i := range sum {
				sum[i] += float32(noiseScale*sigma*zeta) * z[i]
			}
			if err := wb.Observe(step, sum, nil); err != nil {
				panic(err)
			}
		}
		res, err := wb.Result(delta, 0.95, audit.Bonferroni)
		if err != nil {
			panic(err)
		}
		return res
	}
	fmt.Printf("claimed epsilon %.2f\n", claimed)
	ok := run(1)
	fmt.Printf("correct noise: lower bound %.2f, claim violated: %v\n", ok.EpsilonLowerBound, ok.EpsilonLowerBound > claimed)
	broken := run(0.25)
	fmt.Printf("noise x0.25:   lower bound %.2f, claim violated: %v\n", broken.EpsilonLowerBound, broken.EpsilonLowerBound > claimed)
	// Output:
	// claimed epsilon 2.00
	// correct noise: lower bound 0.71, claim violated: false
	// noise x0.25:   lower bound 3.02, claim violated: true
}
