package aggregate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/privacy"
)

// A service releases the private running sum of 2-dimensional vectors for
// 8 steps with the online binary-tree mechanism at (epsilon, delta) =
// (1, 1e-6); each user contributes at most twice, at least 4 steps apart.
func Example() {
	dir, err := os.MkdirTemp("", "aggregate-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	const horizon, k, b = 8, 2, 4
	workload := aggregate.Workload{Kind: aggregate.PrefixSum}
	w, err := workload.MechanismWorkload(horizon)
	if err != nil {
		log.Fatal(err)
	}
	schema, err := privacy.Participation{K: k, B: b}.Schema()
	if err != nil {
		log.Fatal(err)
	}
	spec, err := privacy.ParseMechanism("tree-online")
	if err != nil {
		log.Fatal(err)
	}
	mech, err := aggregate.BuildMechanism(ctx, spec, w, schema)
	if err != nil {
		log.Fatal(err)
	}
	agg, err := aggregate.Open(ctx, filepath.Join(dir, "sums.db"), aggregate.Config{
		Dim: 2, Workload: workload, Mechanism: mech,
		Epsilon: 1, Delta: 1e-6, Clip: 1, K: k, B: b, Count: true,
		// Seed: nil draws the noise seed from crypto/rand.
	})
	if err != nil {
		log.Fatal(err)
	}
	defer agg.Close()

	// Add is safe from many goroutines and returns once durable.
	step, err := agg.Add(ctx, "user-1", []float64{0.6, 0.8})
	fmt.Println("user-1 joined step", step, err)
	_, err = agg.Add(ctx, "user-1", []float64{1, 0})
	fmt.Println("again in the same step:", errors.Is(err, aggregate.ErrSeparation))

	rel, err := agg.Commit(ctx) // closes step 1, adds its noise
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("release", rel.Step, "has", len(rel.Sum), "values and a count:", rel.HasCount)

	l := agg.Ledger()
	fmt.Printf("steps %d of %d, epsilon spent %.3f of %g\n", l.Steps, l.Horizon, l.EpsilonSpent, l.EpsilonBudget)
	// Output:
	// user-1 joined step 1 <nil>
	// again in the same step: true
	// release 1 has 2 values and a count: true
	// steps 1 of 8, epsilon spent 0.291 of 1
}

// A front-end that forwards contributions to an aggregator elsewhere
// refuses, before forwarding, what the aggregator would refuse whatever
// its state.
func ExampleCheckContribution() {
	for _, v := range [][]float64{{0.5, 2}, {0.5}, {math.NaN(), 0}} {
		err := aggregate.CheckContribution("user-1", v, 2)
		fmt.Println(err == nil, errors.Is(err, aggregate.ErrDimension), errors.Is(err, aggregate.ErrNotFinite))
	}
	// Output:
	// true false false
	// false true false
	// false false true
}
