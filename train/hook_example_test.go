package train_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
)

// Non-private work attaches to the loop as a Hook: after each step's
// update it sees the step's metrics and the released parameters, never
// the batch. An optional feature is one field: here a learning-rate
// warm-up over the first 10 steps.
func ExampleHookFunc() {
	trainSet, testSet, err := data.Synthetic(1000, 200, data.Shape{C: 1, H: 4, W: 4}, 2, 1, 3)
	if err != nil {
		log.Fatal(err)
	}
	var steps int
	var norm float64
	watch := train.HookFunc(func(_ context.Context, sm train.StepMetrics, params []float32) error {
		steps++
		norm = 0
		for _, v := range params {
			norm += float64(v) * float64(v)
		}
		return nil
	})
	res, err := train.Run(context.Background(), train.Config{
		Data:      train.Data{Train: trainSet, Test: testSet},
		Model:     train.ModelSpec{Name: "logistic"},
		Privacy:   privacy.Request{Steps: 30, Batch: 50, Mechanism: mfnoise.DPSGD{}, Epsilon: 4, Seed: []byte("example"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 0.5, Warmup: &train.Warmup{Steps: 10}},
		Hooks:     []train.Hook{watch},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("hooked steps:", steps, "of", res.Steps)
	fmt.Println("parameters moved:", norm > 0)
	// Output:
	// hooked steps: 30 of 30
	// parameters moved: true
}
