package clip

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/clip/cliptest"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// Extreme units for the no-data-dependent-control-flow tests
// (docs/math.md): finite values up to the float32 maximum (3e38 is a
// common missing-value sentinel in CSV exports), infinities and NaNs.
// fillExtreme writes into x an example of the kind (cliptest.Corrupt)
// over standard normal values.
func fillExtreme(rng *rand.Rand, kind string, x []float32) {
	for j := range x {
		x[j] = float32(rng.NormFloat64())
	}
	cliptest.Corrupt(rng, kind, x)
}

// extremeModel is a model the extreme-unit tests run.
type extremeModel struct {
	name string
	mk   func() (models.Model, error)
}

// extremeModels are the models of the extreme-unit tests: a logistic
// regression, an MLP, a small CNN and a tabular model (last).
func extremeModels() []extremeModel {
	return []extremeModel{
		{"logistic", func() (models.Model, error) { return models.NewLogistic([3]int{1, 4, 4}, 3, 4) }},
		{"mlp", func() (models.Model, error) { return models.NewMLP([3]int{1, 4, 4}, []int{16}, 3, nn.ReLU, 3) }},
		{"cnn", func() (models.Model, error) { return models.NewCIFARCNN([3]int{2, 8, 8}, 3, 4) }},
		{"tabular", func() (models.Model, error) { return models.NewTabular(3, []int{4}, 2, []int{8}, 3, 5) }},
	}
}

func allFinite32(v []float32) bool {
	for _, x := range v {
		if x-x != 0 {
			return false
		}
	}
	return true
}

// addTo32 is a + b in float64.
func addTo32(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range a {
		out[i] = float32(float64(a[i]) + float64(b[i]))
	}
	return out
}

// TestExtremeExampleChangesNoControlFlow is the rule of docs/math.md for
// ClippedSum (flat and per-layer clipping; also the engine of the
// distributed workers): one extreme example in a batch of ordinary ones
// changes nothing in the call's control flow. The call succeeds and the
// sum is finite; the batch's sum is the others' sum plus the extreme
// example's own contribution (up to float32 summation); a non-finite
// example contributes exactly zero and is counted in NonFinite; and a
// finite one, however large, contributes a vector of norm at most the
// clip norm exactly. (Failed before the fix: clip factors and scaled
// entries that rounded to subnormal float32s gave extreme examples clipped
// norms up to 1.078 zeta (tabular model, inputs 3.4e38) and 1.0004 zeta
// (MLP), per-layer too.)
func TestExtremeExampleChangesNoControlFlow(t *testing.T) {
	mks := extremeModels()
	for mi, mc := range mks {
		for _, perLayer := range []bool{false, true} {
			if perLayer && mc.name == "tabular" {
				continue // the embedding layer has no bias: Layout is not in pairs
			}
			trials := 80
			if mc.name == "cnn" {
				trials = 24
			}
			t.Run(fmt.Sprintf("%s/perlayer=%v", mc.name, perLayer), func(t *testing.T) {
				m, err := mc.mk()
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(mi), 36))
				const n = 5
				worst := 0.0
				for trial := range trials {
					kind := cliptest.Kinds()[trial%len(cliptest.Kinds())]
					zeta := math.Pow(10, -float64(trial%6))
					opt := Options{Norm: zeta, MaxBatch: n + 1}
					lay := m.Layout()
					if perLayer {
						thr := make([]float64, len(lay)/2)
						for l := range thr {
							thr[l] = zeta * (1 + float64(l))
						}
						opt = Options{PerLayer: thr, MaxBatch: n + 1}
					}
					e, err := New(m, opt)
					if err != nil {
						t.Fatal(err)
					}
					x, y := randBatch(rng, n+1, e.chw, m.Classes())
					if mc.name == "tabular" {
						// The categorical id is a valid id, the numeric
						// columns are what is extreme.
						for i := range n + 1 {
							x[i*e.chw+3] = float32(rng.IntN(4))
						}
					}
					p := trial % (n + 1)
					ext := x[p*e.chw : (p+1)*e.chw]
					if mc.name == "tabular" {
						fillExtreme(rng, kind, ext[:3])
					} else {
						fillExtreme(rng, kind, ext)
					}
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
					ox := slices.Concat(x[:p*e.chw], x[(p+1)*e.chw:])
					oy := slices.Concat(y[:p], y[p+1:])
					stO, err := e.ClippedSum(ox, oy, others)
					if err != nil {
						t.Fatal(err)
					}
					if !allFinite32(with) || !allFinite32(alone) {
						t.Fatalf("trial %d (%s): non-finite clipped sum", trial, kind)
					}
					if (kind == "inf" || kind == "nan") && stA.NonFinite != 1 {
						t.Errorf("trial %d (%s): NonFinite %d, want 1", trial, kind, stA.NonFinite)
					}
					if stA.NonFinite == 1 && slices.ContainsFunc(alone, func(v float32) bool { return v != 0 }) {
						t.Errorf("trial %d (%s): a non-finite example contributed", trial, kind)
					}
					if stW.NonFinite != stA.NonFinite+stO.NonFinite {
						t.Errorf("trial %d (%s): NonFinite %d in the batch, %d + %d apart", trial, kind, stW.NonFinite, stA.NonFinite, stO.NonFinite)
					}
					if r := norm64diff(with, addTo32(others, alone)); r > 1e-5*zeta*float64(n+1)*float64(len(lay)) {
						t.Errorf("trial %d (%s): the batch's sum is %g from the others' plus the extreme one's", trial, kind, r)
					}
					if !perLayer {
						nr := norm32(alone)
						worst = max(worst, nr/zeta)
						if nr > zeta {
							t.Errorf("trial %d (%s): the extreme example's clipped norm %.12g > zeta %g (%.12g zeta)", trial, kind, nr, zeta, nr/zeta)
						}
						continue
					}
					for l := 0; l < len(lay); l += 2 {
						nr := norm32(alone[lay[l].Offset : lay[l+1].Offset+lay[l+1].Len])
						worst = max(worst, nr/opt.PerLayer[l/2])
						if nr > opt.PerLayer[l/2] {
							t.Errorf("trial %d (%s) layer %d: clipped norm %.12g > %g", trial, kind, l/2, nr, opt.PerLayer[l/2])
						}
					}
				}
				if worst < 0.99 {
					t.Errorf("largest clipped norm %g of the clip norm: no extreme example was clipped", worst)
				}
			})
		}
	}
}

func norm64diff(a, b []float32) float64 {
	s := 0.0
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s)
}

// TestExtremeUserChangesNoControlFlow is the rule of docs/math.md for
// UserClippedSum, sum and mean (the mean is also the augmentation
// multiplicity path: a user's examples are then K copies of one example):
// one extreme user among ordinary ones changes nothing in the call's
// control flow. The call succeeds and the sum is finite; the batch's sum
// is the others' plus the extreme user's own (up to float32 summation);
// its non-finite examples contribute nothing and are counted; and its
// contribution has norm at most zeta exactly. (Failed before the fix: a
// user of four rows near 3e38 had its float64 sum rounded to float32
// first, which overflowed to Inf, and the clipped sum was NaN.)
func TestExtremeUserChangesNoControlFlow(t *testing.T) {
	mks := extremeModels()[:3] // not the tabular model
	for mi, mc := range mks {
		for _, mode := range []string{"sum", "mean", "copies"} {
			trials := 60
			if mc.name == "cnn" {
				trials = 16
			}
			t.Run(mc.name+"/"+mode, func(t *testing.T) {
				m, err := mc.mk()
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(mi), 37))
				groups := []int{2, 3, 4, 1}
				const ext = 2 // the extreme user: examples 5 to 8
				n := 10
				worst := 0.0
				opt := UserOptions{Mean: mode != "sum"}
				for trial := range trials {
					kind := cliptest.Kinds()[trial%len(cliptest.Kinds())]
					zeta := math.Pow(10, -float64(trial%6))
					e, err := New(m, Options{Norm: zeta, MaxBatch: n})
					if err != nil {
						t.Fatal(err)
					}
					x, y := randBatch(rng, n, e.chw, m.Classes())
					lo, hi := 5, 9
					// Every row of the extreme user is extreme at the same
					// coordinates with the same label, so that the
					// gradients add up rather than cancel.
					fillExtreme(rng, kind, x[lo*e.chw:(lo+1)*e.chw])
					for i := lo + 1; i < hi; i++ {
						if mode == "copies" {
							copy(x[i*e.chw:(i+1)*e.chw], x[lo*e.chw:(lo+1)*e.chw])
						} else {
							for j := range e.chw {
								x[i*e.chw+j] = x[lo*e.chw+j] * float32(1+0.01*rng.NormFloat64())
							}
						}
						y[i] = y[lo]
					}
					d := m.NumParams()
					with, alone, others := make([]float32, d), make([]float32, d), make([]float32, d)
					stW, err := e.UserClippedSum(x, y, groups, opt, with)
					if err != nil {
						t.Fatalf("trial %d (%s): one extreme user stopped the call: %v", trial, kind, err)
					}
					stA, err := e.UserClippedSum(slices.Clone(x[lo*e.chw:hi*e.chw]), y[lo:hi], groups[ext:ext+1], opt, alone)
					if err != nil {
						t.Fatalf("trial %d (%s): %v", trial, kind, err)
					}
					ox := slices.Concat(x[:lo*e.chw], x[hi*e.chw:])
					oy := slices.Concat(y[:lo], y[hi:])
					stO, err := e.UserClippedSum(ox, oy, slices.Concat(groups[:ext], groups[ext+1:]), opt, others)
					if err != nil {
						t.Fatal(err)
					}
					if !allFinite32(with) || !allFinite32(alone) {
						t.Fatalf("trial %d (%s): non-finite clipped sum", trial, kind)
					}
					if (kind == "inf" || kind == "nan") && stA.NonFinite != hi-lo {
						t.Errorf("trial %d (%s): NonFinite %d, want %d", trial, kind, stA.NonFinite, hi-lo)
					}
					if stA.NonFinite == hi-lo && slices.ContainsFunc(alone, func(v float32) bool { return v != 0 }) {
						t.Errorf("trial %d (%s): a user of non-finite examples contributed", trial, kind)
					}
					if stW.NonFinite != stA.NonFinite+stO.NonFinite {
						t.Errorf("trial %d (%s): NonFinite %d in the batch, %d + %d apart", trial, kind, stW.NonFinite, stA.NonFinite, stO.NonFinite)
					}
					if r := norm64diff(with, addTo32(others, alone)); r > 1e-5*zeta*float64(len(groups)) {
						t.Errorf("trial %d (%s): the batch's sum is %g from the others' plus the extreme user's", trial, kind, r)
					}
					nr := norm32(alone)
					worst = max(worst, nr/zeta)
					if nr > zeta {
						t.Errorf("trial %d (%s): the extreme user's clipped norm %.12g > zeta %g (%.12g zeta)", trial, kind, nr, zeta, nr/zeta)
					}
				}
				if worst < 0.99 {
					t.Errorf("largest clipped norm %g of zeta: no extreme user was clipped", worst)
				}
			})
		}
	}
}
