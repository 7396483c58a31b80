package noise

import (
	"math"
	"math/big"
	mrand "math/rand/v2"
	"testing"
)

// TestDiscreteGaussianPMF compares 200,000 draws of N_Z(0, 3/2) at a fixed
// key with the exact probabilities (normalized over |x| <= 60, the rest
// below 1e-500) by a chi-square test over the 13 cells x = -6..6 and the
// two tails: critical value 37.7 for 14 degrees of freedom at a false-alarm
// rate of 1e-3.
func TestDiscreteGaussianPMF(t *testing.T) {
	dg, err := NewDiscreteGaussian(big.NewRat(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	const draws = 200000
	g := mrand.NewChaCha8([32]byte{1, 2, 3})
	counts := map[int64]int{}
	for range draws {
		counts[dg.Sample(g).Int64()]++
	}
	w := func(x float64) float64 { return math.Exp(-x * x / 3) }
	z := 0.0
	for x := -60; x <= 60; x++ {
		z += w(float64(x))
	}
	chi, tails, ptail := 0.0, 0, 0.0
	for x := int64(-60); x <= 60; x++ {
		p := w(float64(x)) / z
		if x < -6 || x > 6 {
			tails += counts[x]
			ptail += p
			continue
		}
		e := p * draws
		chi += (float64(counts[x]) - e) * (float64(counts[x]) - e) / e
	}
	e := ptail * draws
	chi += (float64(tails) - e) * (float64(tails) - e) / e
	if chi > 37.7 {
		t.Errorf("chi-square %.1f > 37.7 (14 df, false-alarm rate 1e-3): not N_Z(0, 3/2)", chi)
	}
}

// TestDiscreteGaussianLargeSigma checks the mean and variance of 20,000
// draws at sigma = 2^70 (the scale of the aggregator's integer releases)
// within 5 standard errors.
func TestDiscreteGaussianLargeSigma(t *testing.T) {
	s := new(big.Rat).SetFrac(new(big.Int).Lsh(big.NewInt(1), 140), big.NewInt(1))
	dg, err := NewDiscreteGaussian(s)
	if err != nil {
		t.Fatal(err)
	}
	const draws = 20000
	g := mrand.NewChaCha8([32]byte{9})
	sum, sq := 0.0, 0.0
	for range draws {
		x, _ := new(big.Float).SetInt(dg.Sample(g)).Float64()
		x /= math.Ldexp(1, 70)
		sum += x
		sq += x * x
	}
	mean, v := sum/draws, sq/draws
	if math.Abs(mean) > 5/math.Sqrt(draws) || math.Abs(v-1) > 5*math.Sqrt(2.0/draws) {
		t.Errorf("mean %.4f, variance %.4f (in sigma^2), want 0 and 1 within 5 standard errors", mean, v)
	}
}

func TestExactRowsResume(t *testing.T) {
	seed := testSeed(5)
	v := big.NewRat(1<<40, 3)
	a, err := NewExactRows(4, 3, v, seed)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]*big.Int, 3)
	if err := a.Next(row); err != nil {
		t.Fatal(err)
	}
	st, _ := a.MarshalBinary()
	want := make([]*big.Int, 3)
	if err := a.Next(want); err != nil {
		t.Fatal(err)
	}
	b, _ := NewExactRows(4, 3, v, nil)
	if err := b.UnmarshalBinary(st); err != nil {
		t.Fatal(err)
	}
	if err := b.Next(row); err != nil {
		t.Fatal(err)
	}
	for i := range row {
		if row[i].Cmp(want[i]) != 0 {
			t.Fatalf("resumed row %v, want %v", row, want)
		}
	}
	c, _ := NewExactRows(4, 3, big.NewRat(1, 1), nil)
	if err := c.UnmarshalBinary(st); err == nil {
		t.Error("a state restored into a stream with another variance")
	}
}

func BenchmarkDiscreteGaussian(b *testing.B) {
	for _, bitsSigma := range []int{20, 70} {
		b.Run("sigma=2^"+big.NewInt(int64(bitsSigma)).String(), func(b *testing.B) {
			v := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(2*bitsSigma)))
			dg, _ := NewDiscreteGaussian(v)
			g := mrand.NewChaCha8([32]byte{})
			for b.Loop() {
				dg.Sample(g)
			}
		})
	}
}
