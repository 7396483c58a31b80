package accountant

import (
	"errors"
	"math"
	"testing"
)

// TestDiscreteGaussianDelta checks the exact privacy loss of the discrete
// Gaussian (DiscreteGaussianDelta) against independent computations:
//   - the exact delta(eps) of the one-dimensional discrete Gaussian with
//     sensitivity 1 (CKS 2020, Thm. 7, by direct summation over |x| <=
//     60 sigma + 50 in Python, 2026-11-25), to a relative 1e-9;
//   - dp_accounting's DiscreteGaussianPrivacyLoss calibrations (its C++
//     test, privacy_loss_mechanism_test.cc: sensitivity 1, eps 1, delta
//     0.12693674 -> sigma 1.0407; sensitivity 1, eps 16, delta 1e-5 ->
//     0.3062; sensitivity 3, eps 1, delta 0.78760074 -> 0.9928, each to
//     1e-4): the delta target must lie between our delta at sigma -+ 1e-4;
//   - the continuous Gaussian for large s: at s = 200 and shift 100 the
//     exact delta is within a relative 2e-4 of GaussianDelta(2, eps), ten
//     times closer than at s = 20 (the gap falls as 1/s^2), and for the
//     two-coordinate shift (6, 8) at s = 30 within 1e-3 of
//     GaussianDelta(3, eps).
func TestDiscreteGaussianDelta(t *testing.T) {
	for _, c := range []struct{ sigma, eps, exact float64 }{
		{1, 1, 0.14135133940562183},
		{1, 2, 0.02481105182252768},
		{2, 0.5, 0.054007223694154366},
		{2, 1, 0.007248776845952581},
		{0.5, 3, 0.10141453412993964},
		{3, 0.3, 0.03847246063153084},
	} {
		got, err := DiscreteGaussianDelta(c.sigma, []int64{1}, c.eps)
		if err != nil || relErr(got, c.exact) > 1e-9 {
			t.Errorf("s %g, eps %g: delta %.12g, exact (CKS Thm. 7) %.12g (%v)", c.sigma, c.eps, got, c.exact, err)
		}
		// The zCDP bound never undercuts it.
		if d, _ := ZCDPDelta(ZCDPRho(c.sigma), c.eps); d < c.exact {
			t.Errorf("s %g, eps %g: zCDP delta %.6g below the exact %.6g", c.sigma, c.eps, d, c.exact)
		}
	}
	for _, c := range []struct {
		sens              int64
		eps, delta, sigma float64
	}{{1, 1, 0.12693674, 1.0407}, {1, 16, 1e-5, 0.3062}, {3, 1, 0.78760074, 0.9928}} {
		hi, _ := DiscreteGaussianDelta(c.sigma-1e-4, []int64{c.sens}, c.eps)
		lo, _ := DiscreteGaussianDelta(c.sigma+1e-4, []int64{c.sens}, c.eps)
		if !(lo <= c.delta && c.delta <= hi) {
			t.Errorf("sensitivity %d, eps %g: delta %.8g at s %g, %.8g at %g: dp_accounting's s %g for delta %g is not between", c.sens, c.eps, hi, c.sigma-1e-4, lo, c.sigma+1e-4, c.sigma, c.delta)
		}
	}
	for _, eps := range []float64{0.5, 1, 2, 4} {
		far, _ := DiscreteGaussianDelta(200, []int64{100}, eps)
		near, _ := DiscreteGaussianDelta(20, []int64{10}, eps)
		cont := gaussianDelta(2, eps)
		if e := math.Abs(far/cont - 1); e > 2e-4 || e > math.Abs(near/cont-1)/10 {
			t.Errorf("eps %g: exact delta %.10g at s 200, %.10g at s 20, continuous %.10g: want the gap to fall 100-fold", eps, far, near, cont)
		}
		two, _ := DiscreteGaussianDelta(30, []int64{6, 8}, eps)
		if c3 := gaussianDelta(3, eps); relErr(two, c3) > 1e-3 {
			t.Errorf("eps %g: shift (6, 8) at s 30: delta %.10g, continuous %.10g", eps, two, c3)
		}
	}
	if _, err := DiscreteGaussianDelta(2000, []int64{1000}, 1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a lattice of 5e7 points: err %v, want ErrUnsupported", err)
	}
	if d, err := DiscreteGaussianDelta(1, []int64{0, 0}, 0.5); d != 0 || err != nil {
		t.Errorf("zero shift: delta %v (%v), want 0", d, err)
	}
}

// TestDiscreteGaussianBound checks that DiscreteGaussianEpsilon never
// claims less than the exact privacy loss of any integer shift of norm at
// most the sensitivity, in several coordinate patterns (one coordinate,
// two, many equal, mixed) at noise scales s = sigma * 10 from 8 (where the
// smoothing bound starts) to 30: at the exact delta(eps) of the pattern
// the bound's eps must be at least eps. At s >= 15 and delta >= 1e-10 the
// smoothing bound must be below zCDP's, so that the check is of the
// smoothing argument itself.
func TestDiscreteGaussianBound(t *testing.T) {
	const sens = 10
	ones := make([]int64, 36)
	for i := range ones {
		ones[i] = 1
	}
	twos := make([]int64, 25)
	for i := range twos {
		twos[i] = 2
	}
	patterns := [][]int64{{10}, {6, 8}, {7, 7}, {5, 5, 5, 5}, {3, 4, 5, 5, 5}, twos, append(ones, 8), {1}, {9, 4}}
	for _, sigma := range []float64{0.8, 1, 1.5, 3} {
		for _, mu := range patterns {
			for _, eps := range []float64{0.25, 0.5, 1, 2, 4, 8} {
				d, err := DiscreteGaussianDelta(sigma*sens, mu, eps)
				if err != nil {
					t.Fatal(err)
				}
				if d < 1e-300 || d > 0.5 {
					continue
				}
				got, err := DiscreteGaussianEpsilon(sigma, d, sens)
				if err != nil || got < eps*(1-1e-9) {
					t.Errorf("sigma %g, shift %v: exact delta %.6g at eps %g, bound claims eps %.9g (%v)", sigma, mu, d, eps, got, err)
				}
				z, _ := ZCDPEpsilon(ZCDPRho(sigma), d)
				if sigma >= 1.5 && d >= 1e-10 && !(got < z) {
					t.Errorf("sigma %g, delta %.3g: bound %.6g not below zCDP %.6g: smoothing not used", sigma, d, got, z)
				}
			}
		}
	}
}

// TestDiscreteGaussianAccounting checks the calibration: at the service's
// scale (integer sensitivity 2^20 and more) the multiplier is the
// continuous Gaussian's to a relative 1e-9; at sensitivity 1 (no
// smoothing) it is zCDP's, within [1, 1.1] of the continuous; and the zCDP
// conversion against dp_accounting's RdpAccountant for GaussianDpEvent
// on its default order grid (Python, 2026-11-25): our optimum over
// continuous orders must be at most that and within 2%.
func TestDiscreteGaussianAccounting(t *testing.T) {
	for _, c := range []struct{ sigma, delta, dpAccounting float64 }{
		{1, 1e-5, 4.728507067217623},
		{2, 1e-6, 2.4191024886939205},
		{4.0451, 1e-5, 1.0000775970722449},
		{0.8, 1e-6, 6.734624610068333},
		{10, 1e-6, 0.4299515190917843},
	} {
		got, err := ZCDPEpsilon(ZCDPRho(c.sigma), c.delta)
		if err != nil {
			t.Fatal(err)
		}
		if got > c.dpAccounting*(1+1e-9) || got < 0.98*c.dpAccounting {
			t.Errorf("sigma %g, delta %g: eps %.6f, dp_accounting (order grid) %.6f: want at most it and within 2%%", c.sigma, c.delta, got, c.dpAccounting)
		}
		if d, _ := DiscreteGaussianEpsilon(c.sigma, c.delta, 1); d != got {
			t.Errorf("sigma %g, sensitivity 1: eps %v, want zCDP's %v", c.sigma, d, got)
		}
	}
	for _, eps := range []float64{0.5, 1, 2, 8} {
		cont, _ := GaussianSigma(eps, 1e-6)
		for _, sens := range []float64{1, 1 << 20, 1 << 40} {
			s, err := DiscreteGaussianSigma(eps, 1e-6, sens)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := DiscreteGaussianEpsilon(s, 1e-6, sens)
			lower, _ := DiscreteGaussianEpsilon(s*(1-1e-6), 1e-6, sens)
			if got > eps || !(lower > eps) {
				t.Errorf("DiscreteGaussianSigma(%g, sensitivity %g) = %v: eps %v there, %v just below: not the smallest sigma meeting the target", eps, sens, s, got, lower)
			}
			lo, hi := 1.0, 1.1
			if sens > 1 {
				lo, hi = 1, 1+1e-9
			}
			if r := s / cont; r < lo || r > hi {
				t.Errorf("eps %g, sensitivity %g: discrete multiplier %.12g is %.12g times the continuous %.12g, want within [%g, %g]", eps, sens, s, r, cont, lo, hi)
			}
		}
	}
	for _, bad := range []func() error{
		func() error { _, err := DiscreteGaussianSigma(0, 1e-6, 1); return err },
		func() error { _, err := DiscreteGaussianEpsilon(math.NaN(), 1e-6, 1); return err },
		func() error { _, err := DiscreteGaussianEpsilon(1, 1e-6, 0.5); return err },
		func() error { _, err := DiscreteGaussianSigma(1, 1e-6, math.Inf(1)); return err },
		func() error { _, err := DiscreteGaussianDelta(0, []int64{1}, 1); return err },
	} {
		if bad() == nil {
			t.Error("invalid input accepted")
		}
	}
}

// TestDiscreteGaussianSigmaV1 checks the multiplier stores made before
// issue 43 were calibrated with: bit for bit the value of that code at
// dpmf's example target (0.6892920154305457 at eps 8, delta 1e-6, the
// old ExampleDiscreteGaussianSigma), and meeting its target by today's
// accounting at every sensitivity.
func TestDiscreteGaussianSigmaV1(t *testing.T) {
	if s, _ := DiscreteGaussianSigmaV1(8, 1e-6); s != 0.6892920154305457 {
		t.Errorf("DiscreteGaussianSigmaV1(8, 1e-6) = %v, want 0.6892920154305457", s)
	}
	for _, eps := range []float64{0.1, 0.5, 1, 2, 8, 30} {
		for _, delta := range []float64{1e-10, 1e-6, 1e-3, 0.1} {
			s, err := DiscreteGaussianSigmaV1(eps, delta)
			if err != nil {
				t.Fatal(err)
			}
			for _, sens := range []float64{1, 10, 1 << 20} {
				if e, _ := DiscreteGaussianEpsilon(s, delta, sens); e > eps {
					t.Errorf("eps %g, delta %g: v1 sigma %v has eps %v at sensitivity %g", eps, delta, s, e, sens)
				}
			}
		}
	}
}
