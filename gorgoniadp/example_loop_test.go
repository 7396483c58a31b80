package gorgoniadp_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/gorgoniadp"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/privacy"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A training loop of the user's own, in gorgonia: the privacy plan gives
// the sampler, the correlated noise (banded matrix factorization) and the
// accounting; the adapter gives the clipped per-example gradient sum in a
// flat vector that is also the parameters' gradient tensors; the noise is
// drawn straight into a gorgonia tensor; gorgonia's own solver updates the
// parameters.
func ExampleModel_ValueGrads() {
	trainSet, testSet, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		log.Fatal(err)
	}
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(1, 28*28), G.WithName("x"))
	w := G.NewMatrix(g, tensor.Float32, G.WithShape(28*28, 10), G.WithName("w"), G.WithInit(G.Zeroes()))
	b := G.NewVector(g, tensor.Float32, G.WithShape(10), G.WithName("b"), G.WithInit(G.Zeroes()))
	logits := G.Must(G.BroadcastAdd(G.Must(G.Mul(x, w)), b, nil, []byte{0}))
	model, err := gorgoniadp.New("logistic", gorgoniadp.Graph{
		Input: x, Logits: logits, Params: []*G.Node{w, b}, Shape: [3]int{1, 28, 28},
	})
	if err != nil {
		log.Fatal(err)
	}

	const steps, batch = 60, 64
	plan, smp, err := privacy.NewPlan(context.Background(), privacy.Request{
		Mechanism: mfnoise.BandMF{Bands: 4}, Examples: trainSet.Len(), Batch: batch, Steps: steps,
		ClipNorm: 1, NoiseMultiplier: 1, Accountant: privacy.RDP,
	})
	if err != nil {
		log.Fatal(err)
	}
	f, err := plan.Factorization()
	if err != nil {
		log.Fatal(err)
	}
	d := model.NumParams()
	src, err := noise.New(f, d, noise.Options{}) // seeded from crypto/rand
	if err != nil {
		log.Fatal(err)
	}
	eng, err := model.Engine(clip.Options{Norm: plan.ClipNorm, MaxBatch: trainSet.Len()})
	if err != nil {
		log.Fatal(err)
	}
	grad := make([]float32, d)
	sum := tensor.New(tensor.WithShape(d), tensor.WithBacking(grad))
	z := tensor.New(tensor.WithShape(d), tensor.Of(tensor.Float32))
	vgs, err := model.ValueGrads(grad) // w and b with their ranges of grad
	if err != nil {
		log.Fatal(err)
	}
	// The solver divides by the expected batch size, never the realized one.
	solver := G.NewVanillaSolver(G.WithLearnRate(0.5), G.WithBatchSize(smp.ExpectedBatch()))
	var idx []int
	for range steps {
		if idx, err = smp.Next(idx); err != nil {
			log.Fatal(err)
		}
		xb, yb := make([]float32, len(idx)*28*28), make([]int, len(idx))
		if err := trainSet.Batch(idx, xb, yb); err != nil {
			log.Fatal(err)
		}
		clear(grad)
		if len(idx) > 0 {
			if _, err := eng.ClippedSum(xb, yb, grad); err != nil {
				log.Fatal(err)
			}
		}
		if err := gorgoniadp.NextDense(src, z); err != nil { // W_i, unit scale
			log.Fatal(err)
		}
		if _, err := tensor.Mul(z, float32(plan.NoiseStd), tensor.UseUnsafe()); err != nil {
			log.Fatal(err)
		}
		if _, err := tensor.Add(sum, z, tensor.UseUnsafe()); err != nil {
			log.Fatal(err)
		}
		if err := solver.Step(vgs); err != nil { // updates w and b in place
			log.Fatal(err)
		}
	}
	eps, err := plan.EpsilonAfter(steps)
	if err != nil {
		log.Fatal(err)
	}
	_, acc, err := eng.Evaluate(testSet.X, testSet.Y)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, %s sampling: epsilon %.2f at delta %g; test accuracy above 55%%: %v\n",
		plan.Mechanism, plan.Sampling, eps, plan.Delta, acc > 0.55)
	// Output:
	// bandmf:4, band-poisson sampling: epsilon 2.10 at delta 1e-05; test accuracy above 55%: true
}
