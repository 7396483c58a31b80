package privacy_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
)

// The privacy plan of a run: banded matrix factorization over 2000 steps
// of CIFAR-10 (50000 examples, batch 500), calibrated to (8, 1e-5). The
// planner picks band sampling for a banded encoder, claims amplification
// (banded-MF Thm 4), and records the guarantee with its assumptions.
func ExampleNewPlan() {
	plan, smp, err := privacy.NewPlan(context.Background(), privacy.Request{
		Mechanism: mfnoise.BandMF{Bands: 4},
		Examples:  50000, Batch: 500, Steps: 200,
		ClipNorm: 1, Epsilon: 8, Delta: 1e-5,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(plan.Mechanism, plan.Sampling, plan.Schema, plan.Amplified)
	fmt.Println(plan.Accounting.Compositions, "compositions at rate", plan.Composition().Rate())
	fmt.Printf("epsilon <= 8: %v, %s adjacency, expected batch %g\n", plan.Epsilon <= 8, plan.Ledger.Adjacency, smp.ExpectedBatch())

	// Claiming amplification for a dense encoder is refused.
	_, _, err = privacy.NewPlan(context.Background(), privacy.Request{
		Mechanism: mfnoise.MFSingle{}, Sampling: privacy.SamplingPoisson,
		Examples: 50000, Batch: 500, Steps: 200, ClipNorm: 1, Epsilon: 8,
	})
	fmt.Println(err)
	// Output:
	// bandmf:4 band-poisson minsep(k=50,b=4) true
	// 50 compositions at rate 0.04
	// epsilon <= 8: true, zero-out adjacency, expected batch 500
	// privacy: plan refused: mf-single with poisson sampling: only banded encoders (dpsgd, bandmf) have amplified accounting; mf-single's encoder is not banded — use fixed-order sampling (unamplified)
}

// Command lines parse mechanism names; the library passes typed values.
func ExampleParseMechanism() {
	for _, name := range []string{"dpsgd", "tree-full/s2", "bandmf:auto", "fft-opt"} {
		m, err := privacy.ParseMechanism(name)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %T %+v\n", m, m, m.Structure())
	}
	// Output:
	// dpsgd mfnoise.DPSGD {Independent:true Bands:1 AutoBands:false FixedOrderOnly:false}
	// tree-full/s2 mfnoise.Stamped {Independent:false Bands:0 AutoBands:false FixedOrderOnly:false}
	// bandmf:auto mfnoise.BandMF {Independent:false Bands:0 AutoBands:true FixedOrderOnly:false}
	// fft-opt mfnoise.FFT {Independent:false Bands:0 AutoBands:false FixedOrderOnly:false}
}

// The accounting of DP-SGD on StackOverflow (1000 of 342477 users per
// round, 2052 rounds): the epsilon at sigma 0.5037 and delta 1e-6 (banded-MF
// Table 5 calibrates to 8 there), and the sigma for epsilon 8.
func ExampleComposition() {
	dpsgd := privacy.Composition{Amplified: true, Q: 1000.0 / 342477, Partitions: 1}
	pld, _ := privacy.PLD.New()
	eps, err := dpsgd.Epsilon(pld, 0.5037, 2052, 1e-6)
	if err != nil {
		log.Fatal(err)
	}
	cal, err := dpsgd.Calibrate(context.Background(), pld, 2052, 8, 1e-6)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d compositions at rate %.3g: epsilon %.2f; epsilon 8 needs sigma %.4f\n", dpsgd.Compositions(2052), dpsgd.Rate(), eps, cal.Sigma)
	// Output:
	// 2052 compositions at rate 0.00292: epsilon 8.00; epsilon 8 needs sigma 0.5037
}
