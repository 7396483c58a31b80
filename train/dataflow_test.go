package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/data"
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
		Train: tr.Dataset, Model: m, ModelName: "tabular",
		Steps: 8, Batch: 100, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, ClipNorm: 1,
		LearningRate: 0.1, UserLevel: true, UserExamples: 4,
		// 99 users and the sentinel one, all in every step.
		Sampling: SamplingFixedOrder,
		Seed:     []byte("sentinel user"), InsecureSeed: true, EvalEvery: 1000,
		OnStep: func(sm StepMetrics) { steps = append(steps, sm) },
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a user with 3e38 rows stopped the run: %v", err)
	}
	if len(steps) != cfg.Steps || res == nil {
		t.Fatalf("%d steps of %d ran", len(steps), cfg.Steps)
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
