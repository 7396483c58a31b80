package train_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/privacy"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/train"
)

// Private training in a Go service: banded matrix factorization with
// amplified accounting, calibrated to (8, 1e-5). The plan states what the
// guarantee assumes before the first step.
func ExampleRun() {
	trainSet, testSet, err := data.Synthetic(2000, 500, data.Shape{C: 1, H: 6, W: 6}, 4, 1, 1)
	if err != nil {
		log.Fatal(err)
	}
	res, err := train.Run(context.Background(), train.Config{
		Data:      train.Data{Train: trainSet, Test: testSet},
		Model:     train.ModelSpec{Name: "logistic"},
		Privacy:   privacy.Request{Steps: 40, Batch: 100, Mechanism: mfnoise.BandMF{Bands: 4}, Epsilon: 8, Delta: 1e-5, Seed: []byte("example"), InsecureSeed: true},
		Optimizer: train.Optimizer{Momentum: 0.9, LearningRate: 0.2, CooldownFrac: 0.25},
	})
	if err != nil {
		log.Fatal(err)
	}
	p := res.Plan
	fmt.Println(p.Mechanism, p.Sampling, p.Schema, p.Accounting.Compositions, "compositions")
	fmt.Printf("epsilon <= 8: %v, delta %g, %s accounting\n", p.Epsilon <= 8, p.Delta, p.Accountant)
	fmt.Println("learned:", res.Final.Accuracy > 0.5)
	// Output:
	// bandmf:4 band-poisson minsep(k=10,b=4) 10 compositions
	// epsilon <= 8: true, delta 1e-05, pld accounting
	// learned: true
}

// A service that drives the steps itself: New builds (and checks) the plan,
// TrainStep runs one step, Evaluate measures and accounts.
func ExampleTrainer() {
	trainSet, testSet, err := data.Synthetic(1000, 200, data.Shape{C: 1, H: 4, W: 4}, 2, 1, 2)
	if err != nil {
		log.Fatal(err)
	}
	tr, err := train.New(context.Background(), train.Config{
		Data:    train.Data{Train: trainSet, Test: testSet},
		Model:   train.ModelSpec{Name: "logistic"},
		Privacy: privacy.Request{Steps: 20, Batch: 50, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1.0, Seed: []byte("example"), InsecureSeed: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()
	for !tr.Done() {
		if _, err := tr.TrainStep(context.Background()); err != nil {
			log.Fatal(err)
		}
	}
	em, err := tr.Evaluate()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("step %d, sampling %s, epsilon %.2f\n", em.Step, tr.Plan().Sampling, em.Epsilon)
	// Output:
	// step 20, sampling poisson, epsilon 1.98
}

// User-level privacy: the examples carry owner ids, the sampler draws
// users, at most 4 examples of a sampled user enter a step and their
// summed gradient is clipped as one, so the claim protects each user's
// whole data.
func ExampleConfig_userLevel() {
	trainSet, testSet, err := data.Synthetic(2000, 500, data.Shape{C: 1, H: 4, W: 4}, 2, 1, 3)
	if err != nil {
		log.Fatal(err)
	}
	owners, err := data.DealOwners(trainSet.Len(), 400, 1, 1) // 400 users, skewed
	if err != nil {
		log.Fatal(err)
	}
	if err := trainSet.SetOwners(owners); err != nil {
		log.Fatal(err)
	}
	res, err := train.Run(context.Background(), train.Config{
		Data:    train.Data{Train: trainSet, Test: testSet},
		Model:   train.ModelSpec{Name: "logistic"},
		Privacy: privacy.Request{Steps: 30, Batch: 50, Mechanism: mfnoise.DPSGD{}, Epsilon: 4, Seed: []byte("example"), InsecureSeed: true, UserBound: &privacy.UserBound{Examples: 4}},
	})
	if err != nil {
		log.Fatal(err)
	}
	p := res.Plan
	fmt.Println(p.Unit, p.UserBound.Examples, p.Ledger.Adjacency, p.Ledger.Params["users"])
	fmt.Println("epsilon <= 4:", p.Epsilon <= 4, "learned:", res.Final.Accuracy > 0.6)
	// Output:
	// user 4 zero-out 400
	// epsilon <= 4: true learned: true
}
