package gorgoniadp

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/clip/cliptest"
	G "gorgonia.org/gorgonia"
)

// TestExtremeExampleChangesNoControlFlow is the rule of docs/math.md
// (no data-dependent control flow) for the gorgonia adapter: one extreme
// example (one input of magnitude 10^30 to the float32 maximum, the
// sentinel 3e38, every input at +-3.4e38, an Inf or a NaN) in a batch of
// ordinary ones changes nothing in the call's control flow. The call
// succeeds with a finite sum equal to the others' sum plus the extreme
// example's own contribution (up to float32 summation); a non-finite
// example contributes exactly zero and is counted; a finite one
// contributes a vector of norm at most the clip norm exactly. (Failed
// before the fix: an example with an Inf input contributed and was not
// counted; one with a NaN input, or with inputs at +-3.4e38 (whose
// convolution overflows to Inf - Inf), made gorgonia's max-pooling
// gradient index out of range in a goroutine of its own, which killed the
// test process; and float32 clip factors rounded to subnormals lifted
// clipped norms above zeta.)
func TestExtremeExampleChangesNoControlFlow(t *testing.T) {
	kinds := cliptest.Kinds()
	for ci, oc := range opCases[:2] {
		t.Run(oc.name, func(t *testing.T) {
			m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(uint64(ci), 1))))
			if err != nil {
				t.Fatal(err)
			}
			chw := oc.shape[0] * oc.shape[1] * oc.shape[2]
			rng := rand.New(rand.NewPCG(uint64(ci), 36))
			const n = 4
			worst := 0.0
			for trial := range 100 {
				kind := kinds[trial%len(kinds)]
				zeta := math.Pow(10, -float64(trial%6))
				e, err := m.Engine(clip.Options{Norm: zeta, MaxBatch: n + 1})
				if err != nil {
					t.Fatal(err)
				}
				x, y := randomBatch(rng, n+1, chw, 3)
				p := trial % (n + 1)
				ext := x[p*chw : (p+1)*chw]
				cliptest.Corrupt(rng, kind, ext)
				d := m.NumParams()
				with, alone, others := make([]float32, d), make([]float32, d), make([]float32, d)
				stW, err := e.ClippedSum(x, y, with)
				if err != nil {
					t.Fatalf("trial %d (%s): one extreme example stopped the call: %v", trial, kind, err)
				}
				stA, err := e.ClippedSum(slices.Clone(ext), y[p:p+1], alone)
				if err != nil {
					t.Fatalf("trial %d (%s): %v", trial, kind, err)
				}
				stO, err := e.ClippedSum(slices.Concat(x[:p*chw], x[(p+1)*chw:]), slices.Concat(y[:p], y[p+1:]), others)
				if err != nil {
					t.Fatal(err)
				}
				sq, diff := 0.0, 0.0
				for j := range with {
					if with[j]-with[j] != 0 {
						t.Fatalf("trial %d (%s): non-finite clipped sum", trial, kind)
					}
					sq += float64(alone[j]) * float64(alone[j])
					dd := float64(with[j]) - float64(others[j]) - float64(alone[j])
					diff += dd * dd
				}
				if (kind == "inf" || kind == "nan") && (stA.NonFinite != 1 || sq != 0) {
					t.Errorf("trial %d (%s): NonFinite %d, contribution norm %g: want 1 and 0", trial, kind, stA.NonFinite, math.Sqrt(sq))
				}
				if stW.NonFinite != stA.NonFinite+stO.NonFinite {
					t.Errorf("trial %d (%s): NonFinite %d in the batch, %d + %d apart", trial, kind, stW.NonFinite, stA.NonFinite, stO.NonFinite)
				}
				if math.Sqrt(diff) > 1e-5*zeta*(n+1) {
					t.Errorf("trial %d (%s): the batch's sum is %g from the others' plus the extreme one's", trial, kind, math.Sqrt(diff))
				}
				nr := math.Sqrt(sq)
				worst = max(worst, nr/zeta)
				if nr > zeta {
					t.Errorf("trial %d (%s): the extreme example's clipped norm %.12g > zeta %g (%.12g zeta)", trial, kind, nr, zeta, nr/zeta)
				}
			}
			if worst < 0.99 {
				t.Errorf("largest clipped norm %g of zeta: no extreme example was clipped", worst)
			}
		})
	}
}
