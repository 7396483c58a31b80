package accountant

import (
	"math"
	"testing"
)

// TestDiscreteGaussianAccounting checks the discrete Gaussian rule against
// two independent computations (Python, plain math module, 2026-11-25):
//   - dp_accounting's RdpAccountant for GaussianDpEvent(sigma) on its
//     default order grid (rdp_privacy_accountant.compute_epsilon): our
//     optimum over continuous orders must be at most that and within 2%;
//   - the exact delta(eps) of the one-dimensional discrete Gaussian with
//     sensitivity 1 (CKS 2020, Thm. 7, by direct summation over |x| <=
//     60 sigma + 50): our zCDP bound must not be below it.
func TestDiscreteGaussianAccounting(t *testing.T) {
	for _, c := range []struct{ sigma, delta, dpAccounting float64 }{
		{1, 1e-5, 4.728507067217623},
		{2, 1e-6, 2.4191024886939205},
		{4.0451, 1e-5, 1.0000775970722449},
		{0.8, 1e-6, 6.734624610068333},
		{10, 1e-6, 0.4299515190917843},
	} {
		got, err := DiscreteGaussianEpsilon(c.sigma, c.delta)
		if err != nil {
			t.Fatal(err)
		}
		if got > c.dpAccounting*(1+1e-9) || got < 0.98*c.dpAccounting {
			t.Errorf("sigma %g, delta %g: eps %.6f, dp_accounting (order grid) %.6f: want at most it and within 2%%", c.sigma, c.delta, got, c.dpAccounting)
		}
		cont, _ := GaussianEpsilon(c.sigma, c.delta)
		if got < cont {
			t.Errorf("sigma %g, delta %g: eps %.6f below the continuous Gaussian's exact %.6f", c.sigma, c.delta, got, cont)
		}
	}
	for _, c := range []struct{ sigma, eps, exact float64 }{
		{1, 1, 0.14135133940562183},
		{1, 2, 0.02481105182252768},
		{2, 0.5, 0.054007223694154366},
		{2, 1, 0.007248776845952581},
		{0.5, 3, 0.10141453412993964},
		{3, 0.3, 0.03847246063153084},
	} {
		d, err := ZCDPDelta(ZCDPRho(c.sigma), c.eps)
		if err != nil {
			t.Fatal(err)
		}
		if d < c.exact {
			t.Errorf("sigma %g, eps %g: zCDP delta %.6g below the exact discrete Gaussian delta %.6g", c.sigma, c.eps, d, c.exact)
		}
	}
	for _, eps := range []float64{0.5, 1, 2, 8} {
		s, err := DiscreteGaussianSigma(eps, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := DiscreteGaussianEpsilon(s, 1e-6)
		lower, _ := DiscreteGaussianEpsilon(s*(1-1e-6), 1e-6)
		if got > eps || !(lower > eps) {
			t.Errorf("DiscreteGaussianSigma(%g) = %v: eps %v there, %v just below: not the smallest sigma meeting the target", eps, s, got, lower)
		}
		cont, _ := GaussianSigma(eps, 1e-6)
		if r := s / cont; r < 1 || r > 1.1 {
			t.Errorf("eps %g: discrete multiplier %.4f is %.3f times the continuous %.4f, want within [1, 1.1]", eps, s, r, cont)
		}
	}
	if _, err := DiscreteGaussianSigma(0, 1e-6); err == nil {
		t.Error("eps = 0 accepted")
	}
	if _, err := DiscreteGaussianEpsilon(math.NaN(), 1e-6); err == nil {
		t.Error("sigma = NaN accepted")
	}
}
