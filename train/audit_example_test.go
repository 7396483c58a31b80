package train_test

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/privacy"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/train"
)

// Audit a DP-SGD run with white-box gradient canaries, then validate the
// auditor on a deliberately broken run (a quarter of the noise, same
// claim).
func ExampleAudit() {
	trainSet, testSet, err := data.Synthetic(200, 50, data.Shape{C: 1, H: 4, W: 4}, 4, 1, 1)
	if err != nil {
		panic(err)
	}
	cfg := train.Config{
		Data:    train.Data{Train: trainSet, Test: testSet},
		Model:   train.ModelSpec{Name: "mlp", Hidden: []int{128}},
		Privacy: privacy.Request{Steps: 100, Batch: 120, Mechanism: mfnoise.DPSGD{}, Epsilon: 2, Seed: []byte("example"), InsecureSeed: true},
	}
	for _, scale := range []float64{1, 0.25} {
		res, err := train.Audit(context.Background(), cfg, train.AuditOptions{
			Canaries: 1000, Mode: train.AuditWhitebox, UnsafeNoiseScale: scale,
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("noise x%g: claimed epsilon %.1f, lower bound above the claim: %v\n", scale, res.Epsilon, res.Violated)
	}
	// Output:
	// noise x1: claimed epsilon 2.0, lower bound above the claim: false
	// noise x0.25: claimed epsilon 2.0, lower bound above the claim: true
}
