package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/models"
)

// sentinelUserCSV is a user-level table (tabularCSV's columns and an owner
// column) whose user "s" owns four rows with the missing-value sentinel
// 3e38 in the income column, as CSV exports of databases often do.
func sentinelUserCSV(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 13))
	var b strings.Builder
	b.WriteString("user,income,city,noise,label\n")
	cities := []string{"oslo", "paris", "rome"}
	for i := range n {
		inc, city := rng.NormFloat64(), cities[rng.IntN(3)]
		label := "low"
		if inc > 0 {
			label = "high"
		}
		fmt.Fprintf(&b, "u%d,%.4f,%s,%.4f,%s\n", i/3, inc, city, rng.NormFloat64(), label)
	}
	for range 4 {
		fmt.Fprintf(&b, "s,3e38,paris,%.4f,low\n", rng.NormFloat64())
	}
	return b.String()
}

// TestSentinelUserDoesNotStopTheRun is issue 36's item 2 end to end: a
// user whose rows hold 3e38 (finite, so the CSV reader accepts them) made
// the user's float32-rounded gradient sum overflow to Inf, 0*Inf = NaN in
// the clipped sum, and the run abort at the first step that sampled the
// user ("non-finite clipped gradient sum"), which revealed the user's
// membership. Every step must complete: the user is clipped in float64
// like any other. (Seen failing before the fix: "train: step 1:
// non-finite clipped gradient sum at coordinate 23".)
func TestSentinelUserDoesNotStopTheRun(t *testing.T) {
	spec := data.TabularSpec{Label: "label", Categorical: []string{"city"}, User: "user"}
	tr, err := data.ReadCSV(strings.NewReader(sentinelUserCSV(297, 1)), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.NewTabular(len(tr.Numeric), tr.Cardinalities(), 4, []int{16}, tr.Classes, 1)
	if err != nil {
		t.Fatal(err)
	}
	var steps []StepMetrics
	cfg := Config{
		Data:      Data{Train: tr.Dataset},
		Model:     ModelSpec{Built: m, Name: "tabular"},
		Privacy:   privacy.Request{Steps: 8, Batch: 100, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, ClipNorm: 1, Sampling: privacy.SamplingFixedOrder, Seed: []byte("sentinel user"), InsecureSeed: true, UserBound: &privacy.UserBound{Examples: 4}},
		Optimizer: Optimizer{LearningRate: 0.1},
		Output:    Output{EvalEvery: 1000, OnStep: func(sm StepMetrics) { steps = append(steps, sm) }},
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a user with 3e38 rows stopped the run: %v", err)
	}
	if len(steps) != cfg.Privacy.Steps || res == nil {
		t.Fatalf("%d steps of %d ran", len(steps), cfg.Privacy.Steps)
	}
	largest := 0.0
	for _, sm := range steps {
		largest = max(largest, sm.NormQuantiles[3])
		t.Logf("step %d: batch %d, largest user norm %g, non-finite %d", sm.Step, sm.BatchSize, sm.NormQuantiles[3], sm.NonFinite)
	}
	if largest < 1e37 {
		t.Errorf("largest user norm %g: no step clipped the sentinel user", largest)
	}
	for _, v := range m.Params() {
		if v-v != 0 {
			t.Fatalf("non-finite parameter %v after the run", v)
		}
	}
}

// TestAugmentMultiplicityExtremeExample is the rule of docs/math.md (no
// data-dependent control flow) for augmentation multiplicity, whose
// engine call clips the mean of each example's K augmented copies: an
// example with one pixel of magnitude 10^30 to 3.4e38, or with every
// pixel at +-3.4e38, never stops a step, and contributes at most the clip
// norm exactly. Whole steps over such data complete. (Failed before the
// fix: the logistic model's contributions reached 1.0024 clip norms.)
func TestAugmentMultiplicityExtremeExample(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(36, 3))
	worst := 0.0
	for trial := range 6 {
		ds := images(t, 32, 1, uint64(trial))
		for i := range 16 {
			x := ds.X[i*64 : (i+1)*64]
			if i%2 == 0 {
				x[rng.IntN(64)] = float32(math.Min(math.Pow(10, 30+8.6*rng.Float64()), math.MaxFloat32))
				continue
			}
			for j := range x {
				x[j] = float32(math.MaxFloat32 * float64(1-2*rng.IntN(2)))
			}
		}
		model, hidden := "logistic", []int(nil)
		if trial%3 == 2 {
			model, hidden = "mlp", []int{8}
		}
		cfg := Config{
			Data:      Data{Train: ds, Augment: &Augmentation{Multiplicity: 4}},
			Model:     ModelSpec{Name: model, Hidden: hidden},
			Privacy:   privacy.Request{Steps: 4, Batch: 8, NoiseMultiplier: 1, ClipNorm: math.Pow(10, -float64(trial%6)), Seed: []byte(fmt.Sprint("augment multiplicity extreme ", trial)), InsecureSeed: true},
			Optimizer: Optimizer{LearningRate: 0.1},
		}
		tr, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 16 {
			st, err := tr.clipChunk(ctx, []int{i}, 1)
			if err != nil {
				t.Fatalf("trial %d, example %d: %v", trial, i, err)
			}
			n := math.Sqrt(sqNorm(tr.chunk))
			if n-n != 0 || n > cfg.Privacy.ClipNorm {
				t.Errorf("trial %d (%s), example %d: contribution norm %.12g > clip norm %g (%.10g clip norms; non-finite %d)", trial, model, i, n, cfg.Privacy.ClipNorm, n/cfg.Privacy.ClipNorm, st.NonFinite)
			}
			worst = max(worst, n/cfg.Privacy.ClipNorm)
		}
		for range 3 {
			if _, err := tr.TrainStep(ctx); err != nil {
				t.Fatalf("trial %d: extreme examples stopped a step: %v", trial, err)
			}
		}
	}
	if worst < 0.99 {
		t.Errorf("largest contribution %g clip norms: no extreme example was clipped", worst)
	}
}

// A clip norm so large that a step's clipped sum could overflow float32
// (and stop the step for some data but not other) is refused at start
// with one line. (Failed before: clip norm 1e36 over 300 examples was
// accepted.)
func TestClipNormThatCouldOverflowTheSumRefused(t *testing.T) {
	ds := images(t, 300, 1, 1)
	_, err := New(context.Background(), Config{
		Data:      Data{Train: ds},
		Model:     ModelSpec{Name: "logistic"},
		Privacy:   privacy.Request{Steps: 2, Batch: 10, NoiseMultiplier: 1, ClipNorm: 1e36, Seed: []byte("huge clip norm"), InsecureSeed: true},
		Optimizer: Optimizer{LearningRate: 0.1},
	})
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "overflow float32") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want a one-line refusal of the clip norm", err)
	}
}

// A training example that the engine would refuse when a step samples it
// (an embedding id out of range) is refused before the first step, with
// one line naming it: a step that failed on the example it sampled would
// reveal that the example was sampled. (Failed before: New accepted it,
// and nn.Plan refuses the row in the step that samples it.)
func TestBadEmbeddingIDRefusedBeforeTheRun(t *testing.T) {
	spec := data.TabularSpec{Label: "label", Categorical: []string{"city"}}
	tr, err := data.ReadCSV(strings.NewReader(tabularCSV(400, 1)), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	cols := tr.Dataset.Shape.Size()
	tr.Dataset.X[123*cols+len(tr.Numeric)] = 7 // city has 3 levels
	m, err := models.NewTabular(len(tr.Numeric), tr.Cardinalities(), 4, []int{8}, tr.Classes, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Config{
		Data:      Data{Train: tr.Dataset},
		Model:     ModelSpec{Built: m, Name: "tabular"},
		Privacy:   privacy.Request{Steps: 20, Batch: 50, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, ClipNorm: 1, Seed: []byte("bad id"), InsecureSeed: true},
		Optimizer: Optimizer{LearningRate: 0.1},
	})
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "example 123") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, want the bad id of example 123 refused in one line", err)
	}
}

// A per-user example bound whose per-example gradients cannot fit in the
// engine's 1 GiB is refused before the first step, not at the step that
// samples a user with that many examples. (Failed before: New accepted
// 65536 examples a user for a model of 7,803 parameters.)
func TestUserExamplesBeyondTheEngineRefused(t *testing.T) {
	_, err := New(context.Background(), Config{
		Data:      Data{Train: ownedSynthetic(t, 300, 40, 1)},
		Model:     ModelSpec{Name: "mlp", Hidden: []int{600}},
		Privacy:   privacy.Request{Steps: 4, Batch: 10, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, ClipNorm: 1, Seed: []byte("k too large"), InsecureSeed: true, UserBound: &privacy.UserBound{Examples: 65536}},
		Optimizer: Optimizer{LearningRate: 0.1},
	})
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "1 GiB") {
		t.Fatalf("got %v, want the per-user bound refused", err)
	}
}
