package audit

import (
	"crypto/sha256"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"
)

// BenchmarkIdealGaussian reports the lower bound (eps_lb, mean over 10
// seeds) that one-run auditing with 1000 canaries gets from a mechanism
// that is exactly the Gaussian mechanism calibrated to eps (delta 1e-5),
// observed directly: the ceiling of a white-box audit of an unamplified
// mechanism at that claim and canary count (BENCHMARKS.md).
func BenchmarkIdealGaussian(b *testing.B) {
	const m, delta = 1000, 1e-5
	for _, eps := range []float64{2, 4, 8} {
		for _, search := range []Search{Bonferroni, Uncorrected} {
			b.Run(fmt.Sprintf("eps=%g/%v", eps, search), func(b *testing.B) {
				sigma, err := privacy.GaussianSigma(eps, delta)
				if err != nil {
					b.Fatal(err)
				}
				var mean float64
				for b.Loop() {
					mean = 0
					for s := range 10 {
						seed := sha256.Sum256(fmt.Appendf(nil, "ideal %d", s))
						rng := mrand.New(mrand.NewChaCha8(seed))
						scores, in := make([]float64, m), make([]bool, m)
						for j := range scores {
							in[j] = rng.IntN(2) == 1
							scores[j] = rng.NormFloat64()
							if in[j] {
								scores[j] += 1 / sigma
							}
						}
						res, err := FromScores(scores, in, delta, 0.95, search)
						if err != nil {
							b.Fatal(err)
						}
						mean += res.EpsilonLowerBound / 10
					}
				}
				b.ReportMetric(mean, "eps_lb")
			})
		}
	}
}
