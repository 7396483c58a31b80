package train

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/privacy"
)

// ownedSynthetic is a random dataset whose examples are dealt to users with
// skewed counts.
func ownedSynthetic(t *testing.T, n, users int, seed uint64) *data.Dataset {
	t.Helper()
	tr, _, err := data.Synthetic(n, 1, data.Shape{C: 1, H: 3, W: 3}, 3, 1, seed)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := data.DealOwners(n, users, 1, seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetOwners(owners); err != nil {
		t.Fatal(err)
	}
	return tr
}

func norm64(a, b []float32) float64 {
	s := 0.0
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s)
}

// TestUserContributionBound is the property of user-level training: for
// random datasets with owners, every sampler over users, one or several
// examples per user, sum or mean, and any single user of a step, removing
// (equivalently, under zero-out, zeroing) all of that user's examples
// changes the step's clipped sum by at most zeta; and no user ever has
// more than k examples in a step. The clip norm is small, so every
// example's gradient is clipped: per-example clipping of a user's k
// examples would move the sum by up to k*zeta and fail (seen failing with
// UserClippedSum replaced by ClippedSum).
func TestUserContributionBound(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		sampling Sampling
		mech     privacy.Mechanism
	}{
		{SamplingPoisson, privacy.DPSGD{}},
		{SamplingBandPoisson, privacy.BandMF{Bands: 2}},
		{SamplingFixedOrder, privacy.DPSGD{}},
	}
	for trial := range 3 {
		for _, c := range cases {
			for _, k := range []int{1, 4} {
				for _, mean := range []bool{false, true} {
					if k == 1 && mean {
						continue
					}
					name := fmt.Sprintf("trial%d/%s/k%d/mean%v", trial, c.sampling, k, mean)
					t.Run(name, func(t *testing.T) {
						seed := uint64(100*trial + k)
						ds := ownedSynthetic(t, 300+50*trial, 40+10*trial, seed)
						const zeta = 0.01
						tr, err := New(ctx, Config{
							Train: ds, ModelName: "mlp", Hidden: []int{5}, Steps: 6, Batch: 10,
							Mechanism: c.mech, Sampling: c.sampling, NoiseMultiplier: 1, ClipNorm: zeta,
							UserLevel: true, UserExamples: k, UserMean: mean,
							Seed: []byte(name), InsecureSeed: true,
						})
						if err != nil {
							t.Fatal(err)
						}
						if tr.Plan().Unit != privacy.UnitUser || tr.sampler.Examples() != tr.users.users.Len() {
							t.Fatalf("plan unit %s, sampler over %d, want user over %d users", tr.Plan().Unit, tr.sampler.Examples(), tr.users.users.Len())
						}
						worst, checked := 0.0, 0
						for step := 1; step <= 3; step++ {
							if _, err := tr.sampleAndClip(ctx); err != nil {
								t.Fatal(err)
							}
							full := slices.Clone(tr.sum)
							users := slices.Clone(tr.idx)
							for _, g := range tr.users.groups {
								if g > k {
									t.Fatalf("step %d: a user has %d examples in the step, bound %d", step, g, k)
								}
							}
							for j := range users {
								tr.idx = slices.Delete(slices.Clone(users), j, j+1)
								clear(tr.sum)
								var sm StepMetrics
								sm.BatchSize = len(tr.idx)
								if err := tr.clipUsers(ctx, step, &sm); err != nil {
									t.Fatal(err)
								}
								d := norm64(full, tr.sum)
								worst = max(worst, d)
								checked++
								// The sums differ by the user's contribution
								// (norm <= zeta exactly) plus the float32
								// rounding of adding it among the others.
								if d > zeta*(1+1e-5) {
									t.Fatalf("step %d: removing user %d moved the clipped sum by %.9g > zeta = %g", step, users[j], d, zeta)
								}
							}
						}
						if checked == 0 || worst < zeta/2 {
							t.Fatalf("checked %d users, largest change %g: the test did not exercise clipped users", checked, worst)
						}
					})
				}
			}
		}
	}
}
