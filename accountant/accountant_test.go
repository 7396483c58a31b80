package accountant

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Banded-MF paper (Choquette-Choo et al. 2023), Table 4: single Gaussian
// mechanism at delta = 1e-6.
var table4 = []struct{ eps, sigma float64 }{
	{1, 4.22468}, {2, 2.23048}, {4, 1.19352}, {8, 0.65294}, {16, 0.36861},
}

// Table 5: StackOverflow Poisson DP-SGD, 1000 of 342477 users per round,
// 2052 rounds, delta = 1e-6; sigma / sqrt(6).
var table5 = []struct{ eps, scaled float64 }{
	{1, 0.37313}, {2, 0.30481}, {4, 0.25136}, {8, 0.20567}, {16, 0.16876},
}

const (
	soQ     = 1000.0 / 342477
	soSteps = 2052
)

func relErr(got, want float64) float64 { return math.Abs(got/want - 1) }

func TestGaussianSigmaTable4(t *testing.T) {
	for _, c := range table4 {
		s, err := GaussianSigma(c.eps, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		if relErr(s, c.sigma) > 1e-5 {
			t.Errorf("GaussianSigma(%v, 1e-6) = %.6f, want %.5f", c.eps, s, c.sigma)
		}
		if d := gaussianDelta(s, c.eps); d > 1e-6 || d < 1e-6*(1-1e-9) {
			t.Errorf("delta at calibrated sigma = %v, want 1e-6 from below", d)
		}
		e, err := GaussianEpsilon(c.sigma, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		if relErr(e, c.eps) > 1e-4 {
			t.Errorf("GaussianEpsilon(%v) = %v, want %v", c.sigma, e, c.eps)
		}
	}
}

// TestGaussianDeltaReference compares the log-domain evaluation with the
// textbook formula where the latter is accurate.
func TestGaussianDeltaReference(t *testing.T) {
	phi := func(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
	for _, sigma := range []float64{0.3, 1, 3} {
		for _, eps := range []float64{0.1, 1, 3} {
			want := phi(-eps*sigma+1/(2*sigma)) - math.Exp(eps)*phi(-eps*sigma-1/(2*sigma))
			got, err := GaussianDelta(sigma, eps)
			if err != nil {
				t.Fatal(err)
			}
			if want > 1e-8 && relErr(got, want) > 1e-9 {
				t.Errorf("GaussianDelta(%v, %v) = %v, want %v", sigma, eps, got, want)
			}
		}
	}
}

func TestGaussianTails(t *testing.T) {
	for _, eps := range []float64{0.01, 1, 30, 100} {
		for _, delta := range []float64{1e-12, 1e-6, 0.1} {
			s, err := GaussianSigma(eps, delta)
			if err != nil {
				t.Fatalf("GaussianSigma(%v, %v): %v", eps, delta, err)
			}
			e, err := GaussianEpsilon(s, delta)
			if err != nil || isInf(e) || relErr(e, eps) > 1e-6 {
				t.Errorf("eps %v delta %v: sigma %v gives eps %v (%v)", eps, delta, s, e, err)
			}
		}
	}
	// In the far tail the formula's two terms both underflow naively.
	d, err := GaussianDelta(0.2, 100)
	if err != nil || math.IsNaN(d) || d < 0 || d > 1e-12 {
		t.Errorf("GaussianDelta(0.2, 100) = %v, %v", d, err)
	}
}

func TestZCDP(t *testing.T) {
	for _, sigma := range []float64{0.5, 1, 4} {
		rho := ZCDPRho(sigma)
		if rho != 1/(2*sigma*sigma) {
			t.Fatalf("rho = %v", rho)
		}
		for _, delta := range []float64{1e-9, 1e-5} {
			e, err := ZCDPEpsilon(rho, delta)
			if err != nil {
				t.Fatal(err)
			}
			exact := gaussianEpsilon(sigma, delta)
			classic := rho + 2*math.Sqrt(rho*math.Log(1/delta))
			// zCDP conversion is a valid bound, looser than exact, tighter than classic.
			if e < exact || e >= classic {
				t.Errorf("sigma %v delta %v: zCDP eps %v not in [%v, %v)", sigma, delta, e, exact, classic)
			}
			d, err := ZCDPDelta(rho, e)
			if err != nil || relErr(d, delta) > 1e-3 {
				t.Errorf("ZCDPDelta(ZCDPEpsilon) = %v, want %v (%v)", d, delta, err)
			}
		}
	}
}

// TestRDPQuadrature checks the subsampled-Gaussian RDP at integer and
// fractional orders against direct numerical integration of
// E_N[(M/N)^alpha].
func TestRDPQuadrature(t *testing.T) {
	for _, c := range []struct{ q, sigma float64 }{{0.01, 1}, {0.1, 2}, {0.5, 0.8}, {0.003, 0.5}} {
		for _, a := range []float64{1.5, 2, 3.5, 8, 12.3, 32} {
			const h = 1e-3
			s2 := c.sigma * c.sigma
			la := math.Inf(-1)
			for x := -40 * c.sigma; x < 40*c.sigma+a+2; x += h {
				lr := logAddExp(math.Log1p(-c.q), math.Log(c.q)+(2*x-1)/(2*s2))
				la = logAddExp(la, -x*x/(2*s2)+a*lr)
			}
			la += math.Log(h / (c.sigma * math.Sqrt(2*math.Pi)))
			want := la / (a - 1)
			got := subsampledGaussianRDP(c.q, c.sigma, a)
			if math.Abs(got-want) > 1e-7*math.Max(1, want) && relErr(got, want) > 1e-6 {
				t.Errorf("q %v sigma %v order %v: rdp %v, quadrature %v", c.q, c.sigma, a, got, want)
			}
		}
	}
}

// TestRDPClassicMNIST reproduces the TensorFlow Privacy tutorial figure
// (MNIST, batch 256 of 60000, sigma 1.1, 60 epochs, delta 1e-5: eps 3.01
// with the classic conversion eps = rdp - log(delta)/(a-1)).
func TestRDPClassicMNIST(t *testing.T) {
	e, _ := DPSGDEvent(1.1, 256.0/60000, 14063)
	r := NewRDP(nil).(*rdpAccountant)
	rdp, err := r.rdp(e)
	if err != nil {
		t.Fatal(err)
	}
	best := math.Inf(1)
	for i, a := range r.orders {
		best = math.Min(best, rdp[i]-math.Log(1e-5)/(a-1))
	}
	if math.Abs(best-3.01) > 0.01 {
		t.Errorf("classic eps = %v, want 3.01", best)
	}
	improved, _ := r.Epsilon(e, 1e-5)
	if improved >= best {
		t.Errorf("improved conversion %v not below classic %v", improved, best)
	}
}

func TestStackOverflowTable5(t *testing.T) {
	pld := NewPLD(PLDOptions{})
	for _, c := range table5 {
		if testing.Short() && c.eps != 8 {
			continue
		}
		cal, err := Calibrate(pld, func(s float64) (Event, error) { return DPSGDEvent(s, soQ, soSteps) }, c.eps, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		got := cal.Sigma / math.Sqrt(6)
		if relErr(got, c.scaled) > 0.005 {
			t.Errorf("eps %v: sigma/sqrt(6) = %.5f, want %.5f", c.eps, got, c.scaled)
		}
		if cal.Epsilon > c.eps || cal.Epsilon < c.eps*(1-1e-3) {
			t.Errorf("eps %v: achieved %v", c.eps, cal.Epsilon)
		}
		t.Logf("eps %v: sigma %.5f (/sqrt6 %.5f vs %.5f), %d evaluations", c.eps, cal.Sigma, got, c.scaled, cal.Evaluations)
	}
}

// TestRDPAbovePLD compares the two accountants on the StackOverflow event
// at the paper's multipliers. RDP must never beat PLD; the gap is largest
// at small sigma, where RDP is known to be loose.
func TestRDPAbovePLD(t *testing.T) {
	pld, rdp := NewPLD(PLDOptions{}), NewRDP(nil)
	for i, c := range table5 {
		if testing.Short() && i != 3 {
			continue
		}
		e, _ := DPSGDEvent(c.scaled*math.Sqrt(6), soQ, soSteps)
		ep, err := pld.Epsilon(e, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		er, err := rdp.Epsilon(e, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		// Measured ratios: 1.56, 1.35, 1.22, 1.18, 1.16.
		limit := map[float64]float64{1: 1.6, 2: 1.4, 4: 1.25, 8: 1.2, 16: 1.2}[c.eps]
		if er < ep || er > limit*ep {
			t.Errorf("eps %v: rdp %v, pld %v: ratio %v, want in [1, %v]", c.eps, er, ep, er/ep, limit)
		}
		t.Logf("eps %v: pld %.4f rdp %.4f ratio %.3f", c.eps, ep, er, er/ep)
	}
}

func accountants() []Accountant { return []Accountant{NewRDP(nil), NewPLD(PLDOptions{})} }

func TestMonotone(t *testing.T) {
	for _, acct := range accountants() {
		eps := func(sigma, q float64, T int) float64 {
			e, err := DPSGDEvent(sigma, q, T)
			if err != nil {
				t.Fatal(err)
			}
			v, err := acct.Epsilon(e, 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		prev := math.Inf(1)
		for _, s := range []float64{0.5, 0.7, 1, 1.5, 3} {
			v := eps(s, 0.01, 500)
			if !(v < prev) {
				t.Errorf("%s: eps(sigma=%v) = %v not below %v", acct.Name(), s, v, prev)
			}
			prev = v
		}
		prev = 0
		for _, T := range []int{1, 10, 100, 1000} {
			v := eps(1, 0.01, T)
			if !(v > prev) {
				t.Errorf("%s: eps(T=%v) = %v not above %v", acct.Name(), T, v, prev)
			}
			prev = v
		}
		prev = 0
		for _, q := range []float64{0.001, 0.01, 0.1, 0.5, 1} {
			v := eps(1, q, 100)
			if !(v > prev) {
				t.Errorf("%s: eps(q=%v) = %v not above %v", acct.Name(), q, v, prev)
			}
			prev = v
		}
	}
}

func TestComposedEqualsSelfComposed(t *testing.T) {
	g := PoissonSampled(0.05, Gaussian(1.2))
	copies := make([]Event, 50)
	for i := range copies {
		copies[i] = g
	}
	for _, acct := range accountants() {
		a, err := acct.Epsilon(Composed(copies...), 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		b, err := acct.Epsilon(SelfComposed(g, 50), 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		// Nested forms reduce to the same mechanism too.
		c, err := acct.Epsilon(Composed(SelfComposed(g, 20), SelfComposed(SelfComposed(g, 3), 10)), 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		if a != b || b != c {
			t.Errorf("%s: composed %v, self-composed %v, nested %v", acct.Name(), a, b, c)
		}
	}
}

// TestHeterogeneousComposition composes two different mechanisms; with
// q = 1 the result is a Gaussian with 1/sigma^2 = sum 1/sigma_i^2.
func TestHeterogeneousComposition(t *testing.T) {
	e := Composed(SelfComposed(Gaussian(2), 3), SelfComposed(Gaussian(4), 4))
	want := gaussianEpsilon(1/math.Sqrt(3.0/4+4.0/16), 1e-6)
	got, err := NewPLD(PLDOptions{}).Epsilon(e, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	if got < want || relErr(got, want) > 1e-3 {
		t.Errorf("pld %v, exact %v", got, want)
	}
	// Mixed subsampling rates: between the bounds given by the extremes.
	mixed := Composed(SelfComposed(PoissonSampled(0.01, Gaussian(1)), 100), SelfComposed(PoissonSampled(0.1, Gaussian(1)), 100))
	lo, _ := DPSGDEvent(1, 0.01, 200)
	hi, _ := DPSGDEvent(1, 0.1, 200)
	for _, acct := range accountants() {
		m, err1 := acct.Epsilon(mixed, 1e-6)
		l, err2 := acct.Epsilon(lo, 1e-6)
		h, err3 := acct.Epsilon(hi, 1e-6)
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		if !(l < m && m < h) {
			t.Errorf("%s: mixed %v not between %v and %v", acct.Name(), m, l, h)
		}
	}
}

// TestPLDMatchesExactGaussian: without subsampling the PLD must agree with
// the exact formula (composition of T Gaussians is one with sigma/sqrt(T)),
// from above.
func TestPLDMatchesExactGaussian(t *testing.T) {
	pld := NewPLD(PLDOptions{})
	for _, c := range []struct {
		sigma float64
		T     int
		delta float64
	}{{1.19352, 1, 1e-6}, {4.22468, 1, 1e-6}, {0.65294, 1, 1e-6}, {10, 100, 1e-6}, {30, 1000, 1e-6},
		{2, 1, 1e-12}, {10, 100, 1e-12}} {
		e, _ := DPSGDEvent(c.sigma, 1, c.T)
		want := gaussianEpsilon(c.sigma/math.Sqrt(float64(c.T)), c.delta)
		got, err := pld.Epsilon(e, c.delta)
		if err != nil {
			t.Fatal(err)
		}
		if got < want*(1-1e-9) || relErr(got, want) > 2e-4 {
			t.Errorf("sigma %v T %v delta %v: pld %v, exact %v", c.sigma, c.T, c.delta, got, want)
		}
		d, err := pld.Delta(e, want)
		if err != nil {
			t.Fatal(err)
		}
		if d < c.delta*(1-1e-6) || relErr(d, c.delta) > 5e-3 {
			t.Errorf("sigma %v T %v: pld delta %v, want %v", c.sigma, c.T, d, c.delta)
		}
	}
}

func TestPLDDeltaEpsilonInverse(t *testing.T) {
	pld := NewPLD(PLDOptions{})
	e, _ := DPSGDEvent(0.8, 0.02, 300)
	for _, delta := range []float64{1e-9, 1e-6, 1e-3} {
		eps, err := pld.Epsilon(e, delta)
		if err != nil {
			t.Fatal(err)
		}
		d, err := pld.Delta(e, eps)
		if err != nil {
			t.Fatal(err)
		}
		if d > delta*(1+1e-9) || d < delta*(1-1e-6) {
			t.Errorf("Delta(Epsilon(%v)) = %v", delta, d)
		}
	}
}

func TestExtremes(t *testing.T) {
	cases := []struct {
		name           string
		sigma, q       float64
		T              int
		eps, delta     float64
		skipPLDInShort bool
	}{
		{"large eps", 0.3, 0.5, 10, 100, 1e-6, false},
		{"tiny delta", 1, 0.01, 1000, 1, 1e-12, false},
		{"q near 1", 1, 0.999, 100, 1, 1e-6, false},
		{"q tiny", 5, 1e-6, 10, 1, 1e-6, false},
		{"T = 1e6", 2, 0.001, 1000000, 1, 1e-6, true},
		{"small sigma", 0.1, 1, 1, 1, 1e-6, false},
	}
	for _, c := range cases {
		e, err := DPSGDEvent(c.sigma, c.q, c.T)
		if err != nil {
			t.Fatal(err)
		}
		for _, acct := range accountants() {
			if acct.Name() == "pld" && c.skipPLDInShort && testing.Short() {
				continue
			}
			eps, err := acct.Epsilon(e, c.delta)
			if err != nil || math.IsNaN(eps) || eps < 0 {
				t.Errorf("%s %s: Epsilon = %v, %v", c.name, acct.Name(), eps, err)
			}
			d, err := acct.Delta(e, c.eps)
			if err != nil || math.IsNaN(d) || d < 0 || d > 1 {
				t.Errorf("%s %s: Delta = %v, %v", c.name, acct.Name(), d, err)
			}
			t.Logf("%s %s: eps %v delta %v", c.name, acct.Name(), eps, d)
		}
	}
}

func TestCalibrate(t *testing.T) {
	ev := func(s float64) (Event, error) { return UnamplifiedMFEvent(s) }
	for _, acct := range accountants() {
		for _, c := range table4 {
			cal, err := Calibrate(acct, ev, c.eps, 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			if cal.Epsilon > c.eps {
				t.Errorf("%s: achieved eps %v above target %v", acct.Name(), cal.Epsilon, c.eps)
			}
			// PLD is tight for the Gaussian; RDP is a valid but looser bound.
			if acct.Name() == "pld" && relErr(cal.Sigma, c.sigma) > 2e-4 {
				t.Errorf("pld: sigma %v, want %v", cal.Sigma, c.sigma)
			}
			if cal.Sigma < c.sigma*(1-1e-4) {
				t.Errorf("%s: sigma %v below the exact %v", acct.Name(), cal.Sigma, c.sigma)
			}
		}
	}
	// RDP calibration of DP-SGD agrees with a direct evaluation.
	rdp := NewRDP(nil)
	cal, err := Calibrate(rdp, func(s float64) (Event, error) { return DPSGDEvent(s, 0.01, 2000) }, 8, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := DPSGDEvent(cal.Sigma*(1-3e-5), 0.01, 2000)
	if v, _ := rdp.Epsilon(e, 1e-6); v <= 8 {
		t.Errorf("sigma %v is not minimal: %v gives eps %v", cal.Sigma, cal.Sigma*(1-3e-5), v)
	}
}

func TestCalibrateErrors(t *testing.T) {
	ev := func(s float64) (Event, error) { return DPSGDEvent(s, 0.01, 100) }
	// The PLD's truncated tail mass alone exceeds this delta.
	if _, err := Calibrate(NewPLD(PLDOptions{}), ev, 1, 1e-16); !errors.Is(err, ErrInfeasible) {
		t.Errorf("delta below tail mass: err = %v, want ErrInfeasible", err)
	}
	if _, err := Calibrate(NewRDP(nil), ev, 0, 1e-6); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("eps 0: err = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := CalibrateContext(ctx, NewRDP(nil), ev, 1, 1e-6); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
	bad := func(s float64) (Event, error) { return BandMFEvent(s, 100, 50, 10, 10) }
	if _, err := Calibrate(NewRDP(nil), bad, 1, 1e-6); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("q > 1 event: err = %v", err)
	}
}

func TestValidation(t *testing.T) {
	nan := math.NaN()
	inf := math.Inf(1)
	invalid := []struct {
		name string
		e    Event
	}{
		{"sigma 0", Gaussian(0)},
		{"sigma < 0", Gaussian(-1)},
		{"sigma NaN", Gaussian(nan)},
		{"sigma Inf", Gaussian(inf)},
		{"q 0", PoissonSampled(0, Gaussian(1))},
		{"q > 1", PoissonSampled(1.5, Gaussian(1))},
		{"q NaN", PoissonSampled(nan, Gaussian(1))},
		{"T 0", SelfComposed(Gaussian(1), 0)},
		{"T < 0", SelfComposed(Gaussian(1), -3)},
		{"empty", Composed()},
		{"nil", Composed(nil)},
	}
	for _, acct := range accountants() {
		for _, c := range invalid {
			if _, err := acct.Epsilon(c.e, 1e-6); !errors.Is(err, dpcore.ErrInvalid) {
				t.Errorf("%s %s: err = %v, want dpcore.ErrInvalid", acct.Name(), c.name, err)
			}
		}
		for _, d := range []float64{0, 1, -1, nan} {
			if _, err := acct.Epsilon(Gaussian(1), d); !errors.Is(err, dpcore.ErrInvalid) {
				t.Errorf("%s delta %v: err = %v", acct.Name(), d, err)
			}
		}
		for _, eps := range []float64{0, -1, nan, inf} {
			if _, err := acct.Delta(Gaussian(1), eps); !errors.Is(err, dpcore.ErrInvalid) {
				t.Errorf("%s eps %v: err = %v", acct.Name(), eps, err)
			}
		}
		nested := PoissonSampled(0.1, SelfComposed(Gaussian(1), 2))
		if _, err := acct.Epsilon(nested, 1e-6); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: subsampled composition: err = %v, want ErrUnsupported", acct.Name(), err)
		}
	}
	if _, err := NewRDP([]float64{0.5}).Epsilon(Gaussian(1), 1e-6); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("order 0.5: err = %v", err)
	}
	if _, err := NewPLD(PLDOptions{TailMass: 0.5}).Epsilon(Gaussian(1), 1e-6); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("tail mass 0.5: err = %v", err)
	}
	for _, f := range []func() error{
		func() error { _, err := GaussianSigma(0, 1e-6); return err },
		func() error { _, err := GaussianSigma(1, 1); return err },
		func() error { _, err := GaussianEpsilon(-1, 1e-6); return err },
		func() error { _, err := GaussianDelta(1, nan); return err },
		func() error { _, err := DPSGDEvent(1, 0, 10); return err },
		func() error { _, err := DPSGDEvent(1, 0.1, 0); return err },
		func() error { _, err := UnamplifiedMFEvent(0); return err },
		func() error { _, err := BandMFEvent(1, 100, 10, 101, 10); return err },
		func() error { _, err := BandMFEvent(1, 100, 11, 10, 10); return err },
		func() error { _, err := ZCDPEpsilon(0, 1e-6); return err },
	} {
		if err := f(); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("err = %v, want dpcore.ErrInvalid", err)
		}
	}
}

func TestBandMFEvent(t *testing.T) {
	// SPEC 7 worked example: CIFAR-10, m = 50000, B = 500, n = 2000.
	e, err := BandMFEvent(1, 50000, 500, 10, 2000)
	if err != nil {
		t.Fatal(err)
	}
	comps, err := components(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 1 || comps[0].count != 200 || comps[0].q != 0.1 || comps[0].sigma != 1 {
		t.Errorf("10 bands: %+v, want 200 compositions at q = 0.1", comps)
	}
	one, _ := BandMFEvent(1, 50000, 500, 1, 2000)
	sgd, _ := DPSGDEvent(1, 0.01, 2000)
	a, _ := json.Marshal(one)
	b, _ := json.Marshal(sgd)
	if string(a) != string(b) {
		t.Errorf("1 band = %s, DP-SGD = %s", a, b)
	}
	// 3 bands of 16666 examples, 667 compositions (ceil(2000/3)).
	e3, _ := BandMFEvent(1, 50000, 500, 3, 2000)
	c3, _ := components(e3)
	if c3[0].count != 667 || c3[0].q != 500.0/16666 {
		t.Errorf("3 bands: %+v", c3)
	}
}

func TestSelectBands(t *testing.T) {
	cands := []BandCandidate{{Bands: 1, Loss: 10}, {Bands: 2, Loss: 6}, {Bands: 10, Loss: 3}, {Bands: 100, Loss: 1}, {Bands: 200, Loss: 0.5}}
	sel, err := SelectBands(NewRDP(nil), 8, 1e-6, 50000, 500, 2000, cands)
	if err != nil {
		t.Fatal(err)
	}
	if len(sel.Table) != len(cands) {
		t.Fatalf("table has %d rows", len(sel.Table))
	}
	// 200 bands of 250 examples cannot hold a batch of 500.
	if last := sel.Table[4]; last.Err == "" || last.Score != 0 {
		t.Errorf("200 bands: %+v, want unscored", last)
	}
	if _, err := json.Marshal(sel); err != nil {
		t.Errorf("selection does not marshal: %v", err)
	}
	best := -1
	for i, r := range sel.Table {
		if r.Err != "" {
			continue
		}
		if r.Score != r.Sigma*r.Sigma*r.Loss {
			t.Errorf("row %d: score %v", i, r.Score)
		}
		if r.Epsilon > 8 {
			t.Errorf("row %d: eps %v", i, r.Epsilon)
		}
		if best < 0 || r.Score < sel.Table[best].Score {
			best = i
		}
	}
	if sel.Best != best || sel.Chosen().Bands != cands[best].Bands {
		t.Errorf("best = %d, want %d", sel.Best, best)
	}
	// Fewer compositions at a higher rate need more noise per step here.
	if !(sel.Table[2].Sigma > sel.Table[0].Sigma) {
		t.Errorf("sigma(10 bands) %v <= sigma(1 band) %v", sel.Table[2].Sigma, sel.Table[0].Sigma)
	}
	if _, err := SelectBands(NewRDP(nil), 8, 1e-6, 50000, 500, 2000, []BandCandidate{{Bands: 200, Loss: 1}}); !errors.Is(err, ErrInfeasible) {
		t.Errorf("no feasible candidate: err = %v", err)
	}
	if _, err := SelectBands(NewRDP(nil), 8, 1e-6, 50000, 500, 2000, []BandCandidate{{Bands: 2, Loss: -1}}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("negative loss: err = %v", err)
	}
}

func TestEventJSONRoundTrip(t *testing.T) {
	e := Composed(SelfComposed(PoissonSampled(0.01, Gaussian(1.1)), 2000), Gaussian(3))
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalEvent(data)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(back)
	if string(again) != string(data) {
		t.Errorf("round trip: %s != %s", again, data)
	}
	want := `{"kind":"composed","events":[{"kind":"self_composed","count":2000,"event":{"kind":"poisson_sampled","q":0.01,"event":{"kind":"gaussian","sigma":1.1}}},{"kind":"gaussian","sigma":3}]}`
	if string(data) != want {
		t.Errorf("json = %s", data)
	}
	if _, err := UnmarshalEvent([]byte(`{"kind":"laplace"}`)); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("unknown kind: err = %v", err)
	}
}

func TestLedgerEntry(t *testing.T) {
	e, _ := DPSGDEvent(1, 0.01, 100)
	acct := NewPLD(PLDOptions{})
	entry, err := NewLedgerEntry(acct, e, 1e-6, ZeroOut, map[string]any{"sigma": 1.0, "q": 0.01}, "clipping norm 1")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := acct.Epsilon(e, 1e-6)
	if entry.Epsilon != want || entry.Delta != 1e-6 || entry.Accountant != "pld" {
		t.Errorf("entry %+v", entry)
	}
	if entry.AccountantConfig["discretization_interval"] != 1e-4 {
		t.Errorf("config %v", entry.AccountantConfig)
	}
	if len(entry.Assumptions) != 3 || entry.Assumptions[1] != AssumePoisson || entry.Adjacency != ZeroOut {
		t.Errorf("assumptions %q", entry.Assumptions)
	}
	data, err := json.Marshal(entry)
	if err != nil {
		t.Fatal(err)
	}
	var back LedgerEntry
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	ev, err := UnmarshalEvent(back.Event)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := acct.Epsilon(ev, back.Delta); got != back.Epsilon {
		t.Errorf("re-accounted eps %v, recorded %v", got, back.Epsilon)
	}
	if _, err := NewLedgerEntry(acct, e, 1e-17, ZeroOut, nil); !errors.Is(err, ErrInfeasible) {
		t.Errorf("delta below tail mass: err = %v", err)
	}
	g, _ := NewLedgerEntry(acct, Gaussian(1), 1e-6, ZeroOut, nil)
	for _, a := range g.Assumptions {
		if a == AssumePoisson {
			t.Errorf("unsampled event assumes Poisson sampling")
		}
	}
}

// exactOneStep is the hockey-stick divergence of one Poisson-subsampled
// Gaussian in each direction, in closed form: with M the mixture and N the
// unsampled output, remove: M(L > eps) - e^eps N(L > eps); add: the same
// with the roles and the loss's sign swapped.
func exactOneStep(sigma, q, eps float64) (remove, add float64) {
	c := component{sigma: sigma, q: q, count: 1}
	phi := func(z float64) float64 { return normCDF(z) }
	x := xOfLoss(c, eps)
	remove = (1-q)*phi(-x/sigma) + q*phi(-(x-1)/sigma) - math.Exp(eps)*phi(-x/sigma)
	x = xOfLoss(c, -eps)
	add = phi(x/sigma) - math.Exp(eps)*((1-q)*phi(x/sigma)+q*phi((x-1)/sigma))
	return math.Max(0, remove), math.Max(0, add)
}

// TestPLDOneStepExact compares the PLD of a single subsampled Gaussian,
// which involves discretization but no FFT, with the closed form: it must
// dominate it and be close.
func TestPLDOneStepExact(t *testing.T) {
	pld := NewPLD(PLDOptions{})
	for _, c := range []struct{ sigma, q float64 }{{1, 0.01}, {0.5, 0.1}, {2, 0.5}, {0.8, 0.999}} {
		e := PoissonSampled(c.q, Gaussian(c.sigma))
		for _, eps := range []float64{0.01, 0.1, 1, 0.123456789, 0.77777777} {
			r, a := exactOneStep(c.sigma, c.q, eps)
			want := math.Max(r, a)
			got, err := pld.Delta(e, eps)
			if err != nil {
				t.Fatal(err)
			}
			if got < want*(1-1e-9) || relErr(got, want) > 1e-4 {
				t.Errorf("sigma %v q %v eps %v: pld delta %v, exact %v (remove %v, add %v)", c.sigma, c.q, eps, got, want, r, a)
			}
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	pld := NewPLD(PLDOptions{})
	e, _ := DPSGDEvent(1, 0.05, 50)
	want, err := pld.Epsilon(e, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	got := make(chan float64, 4)
	for range 4 {
		go func() {
			v, err := pld.Epsilon(e, 1e-6)
			got <- v
			errs <- err
		}()
	}
	for range 4 {
		if v, err := <-got, <-errs; err != nil || v != want {
			t.Errorf("concurrent eps %v (%v), want %v", v, err, want)
		}
	}
}

// TestPLDTwoStepQuadrature checks a composition of two subsampled
// Gaussians against an independent evaluation: delta_2(eps) =
// E[delta_1(eps - L)] over the first step's privacy loss L, by quadrature
// in x, with delta_1 in closed form.
func TestPLDTwoStepQuadrature(t *testing.T) {
	pld := NewPLD(PLDOptions{})
	for _, c := range []struct{ sigma, q, eps float64 }{{1, 0.1, 0.3}, {0.7, 0.05, 0.5}, {2, 0.5, 0.2}} {
		comp := component{sigma: c.sigma, q: c.q, count: 1}
		s := c.sigma
		dens := func(z float64) float64 { return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) / s }
		const n = 200000
		lo, hi := -14*s, 1+14*s
		h := (hi - lo) / n
		var rem, add float64
		for i := 0; i <= n; i++ {
			x := lo + float64(i)*h
			w := h
			if i == 0 || i == n {
				w /= 2
			}
			l := lossRemove(comp, x)
			r, _ := exactOneStep(s, c.q, c.eps-l)
			_, a := exactOneStep(s, c.q, c.eps+l)
			rem += w * ((1-c.q)*dens(x/s) + c.q*dens((x-1)/s)) * r
			add += w * dens(x/s) * a
		}
		want := math.Max(rem, add)
		got, err := pld.Delta(SelfComposed(PoissonSampled(c.q, Gaussian(s)), 2), c.eps)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pld %.9g quad %.9g rem %.6g add %.6g", got, want, rem, add)
		if got < want*(1-1e-6) || relErr(got, want) > 1e-4 {
			t.Errorf("sigma %v q %v eps %v: pld %v, quadrature %v (remove %v, add %v)", s, c.q, c.eps, got, want, rem, add)
		}
	}
}
