package mfnoise_test

import (
	"context"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// ExampleOptimize finds the optimal single-participation factorization of
// 256 steps of prefix sums, certified within 1e-4 of the optimum, and the
// best 2-buffer BLT encoder (O(1) noise memory per coordinate, not O(n))
// through the same door.
func ExampleOptimize() {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(256)
	single, err := mfnoise.Optimize(ctx, mfnoise.Problem{Workload: w, Family: mfnoise.SingleFamily{}}, &optimize.Settings{Gap: 1e-4})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("mf-single: sqrt(loss) = %.1f, gap <= 1e-4: %v\n", math.Sqrt(single.Loss), single.Gap <= 1e-4)
	blt, err := mfnoise.Optimize(ctx, mfnoise.Problem{Workload: w, Family: mfnoise.BLTFamily{Buffers: 2}}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: loss %.3f x mf-single's\n", blt.Toeplitz.Name, blt.Loss/single.Loss)
	// Output:
	// mf-single: sqrt(loss) = 40.4, gap <= 1e-4: true
	// blt:2: loss 1.079 x mf-single's
}

// ExampleBandedEncoder optimizes a 4-banded encoder for 3 epochs of 40
// fixed-order batches of a momentum workload: Result.Banded is the encoder
// by its band (O(n bands) numbers, the only result above
// dpcore.DenseStepLimit steps), its columns of unit norm, so its
// sensitivity under (k,b) = (3,40) participation is sqrt(3).
func ExampleBandedEncoder() {
	ctx := context.Background()
	w, _ := dpcore.MomentumWorkload(120, 0.9, dpcore.CooldownSchedule(120, 0.25, 0.05))
	r, err := mfnoise.Optimize(ctx, mfnoise.Problem{Workload: w, Family: mfnoise.BandedFamily{Bands: 4}}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	e := r.Banded
	norm := 0.0
	for i := 7; i < 11; i++ {
		norm += e.At(i, 7) * e.At(i, 7)
	}
	sc, _ := dpcore.KBParticipation(3, 40)
	sens, _ := r.Factorization.Sensitivity(sc)
	fmt.Printf("%d steps, %d bands, C[11,7] = %v, column 7 norm %.6f\n", e.N, e.Bands, e.At(11, 7), math.Sqrt(norm))
	fmt.Printf("sensitivity under %v: %.6f (%s)\n", sc, sens.Value, sens.Method)
	// Output:
	// 120 steps, 4 bands, C[11,7] = 0, column 7 norm 1.000000
	// sensitivity under kb(k=3,b=40): 1.732051 (nonnegative-gram)
}

// A banded encoder bound to its workload is a dpcore.Strategy that needs
// no n x n matrix: bandmf's representation above dpcore.DenseStepLimit
// steps, whose sensitivity and loss come from the band.
func ExampleBandedEncoder_For() {
	n := dpcore.DenseStepLimit + 8
	e := &mfnoise.BandedEncoder{N: n, Bands: 2, Band: make([]float64, 2*n)}
	for j := 0; j < n; j++ { // C[j,j] = 0.8, C[j+1,j] = 0.6: unit columns
		e.Band[2*j] = 0.8
		if j+1 < n {
			e.Band[2*j+1] = 0.6
		}
	}
	w, _ := dpcore.PrefixSum(n)
	s, err := e.For(w)
	if err != nil {
		fmt.Println(err)
		return
	}
	sc, _ := dpcore.KBParticipation(2, (n+1)/2)
	sens, _ := s.Sensitivity(sc)
	loss, _ := dpcore.LossAt(s, sens.Value)
	_, _, err = s.Matrices()
	fmt.Printf("sensitivity under %v: %.6f (%s), loss %.4g\n", sc, sens.Value, sens.Method, loss)
	fmt.Println(err != nil)
	// Output:
	// sensitivity under kb(k=2,b=4100): 1.414214 (nonnegative-gram), loss 3.433e+07
	// true
}
