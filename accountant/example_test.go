package accountant_test

import (
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/accountant"
)

// The noise multiplier of an unamplified matrix-factorization mechanism
// (sensitivity normalized to 1) for a target guarantee.
func ExampleGaussianSigma() {
	sigma, err := accountant.GaussianSigma(8, 1e-6)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sigma = %.5f\n", sigma)
	// Output: sigma = 0.65294
}

// Calibrating Poisson-sampled DP-SGD on StackOverflow (1000 of 342477 users
// per round, 2052 rounds) to eps = 8 with the PLD accountant, as in the
// banded-MF paper's Table 5, and recording the run's guarantee.
func ExampleCalibrate() {
	const q, steps = 1000.0 / 342477, 2052
	pld := accountant.NewPLD(accountant.PLDOptions{})
	cal, err := accountant.Calibrate(pld, func(sigma float64) (accountant.Event, error) {
		return accountant.DPSGDEvent(sigma, q, steps)
	}, 8, 1e-6)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sigma = %.4f, eps = %.3f at delta = %g\n", cal.Sigma, cal.Epsilon, cal.Delta)

	event, _ := accountant.DPSGDEvent(cal.Sigma, q, steps)
	entry, err := accountant.NewLedgerEntry(pld, event, 1e-6, accountant.ZeroOut, map[string]any{"sigma": cal.Sigma, "q": q})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(entry.Accountant, entry.Adjacency, len(entry.Assumptions), "assumptions")
	// Output:
	// sigma = 0.5037, eps = 8.000 at delta = 1e-06
	// pld zero-out 2 assumptions
}

// Choosing the number of bands for CIFAR-10 (50000 examples, batch 500,
// 2000 steps). The losses would come from optimizing a banded
// factorization for each candidate; these are illustrative.
func ExampleSelectBands() {
	candidates := []accountant.BandCandidate{
		{Bands: 1, Loss: 2000},
		{Bands: 4, Loss: 900},
		{Bands: 16, Loss: 600},
		{Bands: 64, Loss: 500},
	}
	sel, err := accountant.SelectBands(accountant.NewRDP(nil), 8, 1e-5, 50000, 500, 2000, candidates)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range sel.Table {
		fmt.Printf("bands %3d: q = %.3f, %4d compositions, sigma = %.3f, score = %.0f\n",
			r.Bands, r.Q, r.Compositions, r.Sigma, r.Score)
	}
	fmt.Println("chosen:", sel.Chosen().Bands)
	// Output:
	// bands   1: q = 0.010, 2000 compositions, sigma = 0.671, score = 902
	// bands   4: q = 0.040,  500 compositions, sigma = 0.906, score = 739
	// bands  16: q = 0.160,  125 compositions, sigma = 1.412, score = 1196
	// bands  64: q = 0.640,   32 compositions, sigma = 2.448, score = 2997
	// chosen: 4
}

// The noise multiplier of the discrete Gaussian mechanism (exact integer
// releases) for the same target. At integer sensitivity 1 (noise of a few
// units) only zCDP holds, a few percent above the continuous Gaussian's;
// at the service's scale (sensitivity 2^20 and more) smoothing makes it
// the continuous Gaussian's.
func ExampleDiscreteGaussianSigma() {
	for _, sens := range []float64{1, 1 << 20} {
		sigma, err := accountant.DiscreteGaussianSigma(8, 1e-6, sens)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("sensitivity %g: sigma = %.5f\n", sens, sigma)
	}
	// Output:
	// sensitivity 1: sigma = 0.68929
	// sensitivity 1.048576e+06: sigma = 0.65294
}

// DP-SGD under random allocation (each example in exactly one of the 10
// steps of each of 10 epochs) at noise multiplier 2, against Poisson
// sampling at the same rate 1/10: dp_accounting's reference case
// (epsilon 2.4265 at delta 1e-6), here on a coarse 1e-3 grid whose bound
// is a little above it.
func ExampleRandomAllocation() {
	pld := accountant.NewPLD(accountant.PLDOptions{AllocationInterval: 1e-3})
	alloc, err := pld.Epsilon(accountant.SelfComposed(accountant.RandomAllocation(10, accountant.Gaussian(2)), 10), 1e-6)
	if err != nil {
		log.Fatal(err)
	}
	poisson, err := pld.Epsilon(accountant.SelfComposed(accountant.PoissonSampled(0.1, accountant.Gaussian(2)), 100), 1e-6)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("random allocation: eps = %.1f, Poisson: eps = %.1f\n", alloc, poisson)
	// Output: random allocation: eps = 2.5, Poisson: eps = 2.7
}
