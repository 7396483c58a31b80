package accountant

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// The cases below are those of dp_accounting's rdp_privacy_accountant_test
// for RepeatAndSelectDpEvent, with the closed forms it checks against
// (Papernot & Steinke 2022, Cor. 4 and Thm. 6).

// TestTNBGammaInvertsMean: Gamma inverts the mean of the truncated
// negative binomial law (dp_accounting test_gamma_truncated_negative_binomial).
func TestTNBGammaInvertsMean(t *testing.T) {
	for _, gamma := range []float64{0.1, 0.0001, 1, 0.999} {
		for _, shape := range []float64{0, 0.5, 1, 2} {
			mean := tnbMean(gamma, shape)
			g, err := Repetitions{Mean: mean, Shape: shape}.Gamma()
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(g-gamma) > 1e-7 {
				t.Errorf("gamma %v shape %v: mean %v inverts to %v", gamma, shape, mean, g)
			}
			if tnbMean(g, shape) < mean*(1-1e-12) {
				t.Errorf("gamma %v shape %v: Gamma %v has mean %v < %v (the bound would be understated)", gamma, shape, g, tnbMean(g, shape), mean)
			}
		}
	}
}

// TestRepeatSelectGaussianTNB: for a Gaussian mechanism (rho-zCDP) the
// truncated negative binomial bound is Cor. 4 of PS22 in closed form
// (dp_accounting test_repeat_select_gaussian_negative_binomial).
func TestRepeatSelectGaussianTNB(t *testing.T) {
	for _, c := range []struct{ rho, gamma, shape float64 }{
		{0.01, 0.01, 0}, {1, 0.1, 0}, {10, 0.99, 0},
		{0.01, 0.01, 0.5}, {1, 0.1, 0.5}, {10, 0.99, 0.5},
		{0.01, 0.01, 1}, {1, 0.1, 1}, {10, 0.99, 1},
		{0.01, 0.01, 5}, {1, 0.1, 5}, {10, 0.99, 5},
	} {
		mean := tnbMean(c.gamma, c.shape)
		rho := math.Min(c.rho, -math.Log(c.gamma))
		// dp_accounting's list starts at order 1, which the bound of
		// Thm. 2 may use as lambda-hat; 1 + 1e-12 stands for it here.
		orders := []float64{1 + 1e-12, 1.1, 2, math.Sqrt(-math.Log(c.gamma) / rho), 1 + math.Sqrt(math.Log(mean)/rho), 3, 5, 10, 100, 1000, 10000}
		var os, rdp []float64
		for _, a := range orders {
			if a > 1 {
				os = append(os, a)
				rdp = append(rdp, rho*a) // Gaussian: rho-zCDP
			}
		}
		got, err := RepeatAndSelectRDP(os, rdp, Repetitions{Mean: mean, Shape: c.shape})
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range os {
			tail := 2*(1+c.shape)*math.Sqrt(-rho*math.Log(c.gamma)) - c.shape*rho
			want := rho*(a-1) + math.Log(mean)/(a-1) + tail
			if a <= 1+math.Sqrt(math.Log(mean)/rho) {
				want = 2*math.Sqrt(rho*math.Log(mean)) + tail
			}
			if math.Abs(got[i]-want) > 1e-6*math.Max(1, want) {
				t.Errorf("rho %v gamma %v shape %v order %v: %v, want %v", rho, c.gamma, c.shape, a, got[i], want)
			}
		}
	}
}

// TestRepeatSelectTrivial: one run (mean 1) costs what the run costs
// (dp_accounting test_repeat_select_trivial).
func TestRepeatSelectTrivial(t *testing.T) {
	orders := append([]float64{1 + 1e-12}, DefaultRDPOrders()...)
	for _, c := range []struct{ shape, sigma float64 }{{0, 1}, {0.5, 10}, {1, 0.1}, {2, 1}} {
		rdp := make([]float64, len(orders))
		for i, a := range orders {
			rdp[i] = a / (2 * c.sigma * c.sigma)
		}
		got, err := RepeatAndSelectRDP(orders, rdp, Repetitions{Mean: 1, Shape: c.shape})
		if err != nil {
			t.Fatal(err)
		}
		for i := range orders {
			if math.Abs(got[i]-rdp[i]) > 1e-9*math.Max(1, rdp[i]) {
				t.Errorf("shape %v sigma %v order %v: %v, want %v", c.shape, c.sigma, orders[i], got[i], rdp[i])
			}
		}
	}
}

// TestRepeatSelectGaussianPoisson: the Poisson bound of a Gaussian is at
// least Thm. 6 with the exact (eps, delta) curve of the Gaussian (the
// accountant converts the Rényi curve, which is looser); the check and the
// cases are dp_accounting's test_repeat_and_select_gaussian_poisson. The
// value itself is checked against the theorem with the Rényi conversion.
func TestRepeatSelectGaussianPoisson(t *testing.T) {
	orders := DefaultRDPOrders()
	for _, sigma := range []float64{0.001, 1, 1000} {
		for _, mean := range []float64{1, 1000, 1e9} {
			got, err := SelectionRDP([]Event{Gaussian(sigma)}, PoissonRepetitions(mean), orders)
			if err != nil {
				t.Fatal(err)
			}
			exact := make([]float64, len(orders))
			for i, a := range orders {
				eps := math.Log1p(1 / (a - 1))
				x := (eps*sigma - 0.5/sigma) / math.Sqrt2
				y := (eps*sigma + 0.5/sigma) / math.Sqrt2
				delta := math.Erfc(x)/2 - math.Exp(eps)*math.Erfc(y)/2
				exact[i] = a*0.5/(sigma*sigma) + mean*delta + math.Log(mean)/(a-1)
			}
			for i, a := range orders {
				lb := math.Inf(1)
				for j, b := range orders {
					if b >= a {
						lb = math.Min(lb, exact[j])
					}
				}
				if !(lb <= got[i]*(1+1e-12)) {
					t.Errorf("sigma %v mean %v order %v: %v below the exact-delta bound %v", sigma, mean, a, got[i], lb)
				}
			}
		}
	}
	// sigma 1, mean 10, order 2: deltahat at eps log 2 from the Rényi
	// curve a/2 is min over orders of exp((a-1)(a/2 - log 2 + log(1-1/a)) - log a)
	// (and the KL bound, larger here).
	orders = []float64{2, 3, 4}
	got, err := RepeatAndSelectRDP(orders, []float64{1, 1.5, 2}, PoissonRepetitions(10))
	if err != nil {
		t.Fatal(err)
	}
	dh := math.Inf(1)
	for _, a := range orders {
		dh = math.Min(dh, math.Exp((a-1)*(a/2-math.Log(2)+math.Log(1-1/a))-math.Log(a)))
	}
	if want := 1 + 10*dh + math.Log(10); math.Abs(got[0]-want) > 1e-12 {
		t.Errorf("order 2: %v, want %v", got[0], want)
	}
}

// TestSelectionEpsilon: the selection costs at least one run of its worst
// candidate, more with more runs, and only the worst candidate counts.
func TestSelectionEpsilon(t *testing.T) {
	const delta = 1e-5
	one, err := NewRDP(nil).Epsilon(Gaussian(2), delta)
	if err != nil {
		t.Fatal(err)
	}
	prev := one
	for _, mean := range []float64{1, 2, 10, 100} {
		for _, r := range []Repetitions{PoissonRepetitions(mean), {Mean: mean, Shape: 1}, {Mean: mean, Shape: 0}} {
			both, err := SelectionEpsilon([]Event{Gaussian(4), Gaussian(2)}, r, delta, nil)
			if err != nil {
				t.Fatal(err)
			}
			worst, err := SelectionEpsilon([]Event{Gaussian(2)}, r, delta, nil)
			if err != nil {
				t.Fatal(err)
			}
			if both != worst {
				t.Errorf("%v: candidates {4, 2} cost %v, the worst alone %v", r, both, worst)
			}
			if !(worst >= one) {
				t.Errorf("%v: %v below one run's %v", r, worst, one)
			}
			if r.Shape == 1 {
				if !(worst >= prev) {
					t.Errorf("%v: %v below the smaller mean's %v", r, worst, prev)
				}
				prev = worst
			}
		}
	}
	for _, bad := range []Repetitions{{Mean: 0.5, Shape: 1}, {Mean: math.NaN(), Shape: 1}, {Mean: 2, Shape: -1}, {Mean: 2, Shape: math.NaN()}} {
		if _, err := SelectionEpsilon([]Event{Gaussian(2)}, bad, delta, nil); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%+v: err %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := SelectionEpsilon(nil, PoissonRepetitions(2), delta, nil); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("no candidates: err %v", err)
	}
}

// TestRepetitionsDraw: the draws follow the law (fixed seed; the sample
// mean within 5 standard errors, P[K=1] of the geometric law gamma).
func TestRepetitionsDraw(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 20000
	for _, r := range []Repetitions{PoissonRepetitions(4), {Mean: 4, Shape: 0}, {Mean: 4, Shape: 0.5}, {Mean: 4, Shape: 1}, {Mean: 4, Shape: 2}, {Mean: 1, Shape: 1}} {
		var sum, sq float64
		ones := 0
		for range n {
			k, err := r.Draw(rng.Float64)
			if err != nil {
				t.Fatal(err)
			}
			if k < 0 || k == 0 && !r.Poisson() {
				t.Fatalf("%v: drew %d", r, k)
			}
			if k == 1 {
				ones++
			}
			sum += float64(k)
			sq += float64(k) * float64(k)
		}
		mean := sum / n
		se := math.Sqrt((sq/n - mean*mean) / n)
		if math.Abs(mean-r.Mean) > 5*se+1e-12 {
			t.Errorf("%v: sample mean %v (se %v)", r, mean, se)
		}
		if r.Shape == 1 && r.Mean == 4 {
			if p := float64(ones) / n; math.Abs(p-0.25) > 5*math.Sqrt(0.25*0.75/n) {
				t.Errorf("geometric: P[K=1] %v, want 0.25", p)
			}
		}
	}
}

// TestRepetitionsJSON: a Poisson law (shape +Inf) survives JSON.
func TestRepetitionsJSON(t *testing.T) {
	for _, r := range []Repetitions{PoissonRepetitions(3), {Mean: 2, Shape: 0}, {Mean: 5, Shape: 1}} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got Repetitions
		if err := json.Unmarshal(b, &got); err != nil || got != r {
			t.Errorf("%v: %s decodes to %v, %v", r, b, got, err)
		}
	}
	var r Repetitions
	if err := json.Unmarshal([]byte(`{"law":"poisson","mean":2,"shape":1}`), &r); err == nil {
		t.Error("a Poisson law with a shape decoded")
	}
}

// TestRDPEpsilon: the conversion is NewRDP's, and two selections released
// together cost more than either and no more than the sum.
func TestRDPEpsilon(t *testing.T) {
	orders := DefaultRDPOrders()
	rdp := make([]float64, len(orders))
	for i, a := range orders {
		rdp[i] = a / (2 * 3.0 * 3.0)
	}
	got, err := RDPEpsilon(orders, rdp, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := NewRDP(orders).Epsilon(Gaussian(3), 1e-5)
	if got != want {
		t.Errorf("RDPEpsilon %v, NewRDP %v", got, want)
	}
	r := Repetitions{Mean: 3, Shape: 1}
	one, _ := SelectionRDP([]Event{Gaussian(3)}, r, orders)
	sum := make([]float64, len(orders))
	for i := range sum {
		sum[i] = 2 * one[i]
	}
	e1, _ := RDPEpsilon(orders, one, 1e-5)
	e2, err := RDPEpsilon(orders, sum, 1e-5)
	if err != nil || !(e2 > e1 && e2 <= 2*e1) {
		t.Errorf("one selection %v, two %v (%v)", e1, e2, err)
	}
}
