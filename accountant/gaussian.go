package accountant

import (
	"fmt"
	"math"
)

// GaussianDelta returns the exact delta(eps) of the Gaussian mechanism with
// sensitivity 1 and noise multiplier sigma (Balle & Wang 2018, Thm. 8):
//
//	delta = Phi(-eps*sigma + 1/(2 sigma)) - e^eps Phi(-eps*sigma - 1/(2 sigma)).
//
// It is evaluated in the log domain, so it stays accurate for delta far
// below 1e-12 and eps in the hundreds.
func GaussianDelta(sigma, eps float64) (float64, error) {
	if err := checkSigma(sigma); err != nil {
		return 0, fmt.Errorf("GaussianDelta: %w", err)
	}
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("GaussianDelta: %w", err)
	}
	return gaussianDelta(sigma, eps), nil
}

func gaussianDelta(sigma, eps float64) float64 {
	b := eps*sigma - 1/(2*sigma)
	a := eps*sigma + 1/(2*sigma)
	l1 := logNormCDF(-b)
	l2 := eps + logNormCDF(-a)
	if l2 >= l1 {
		return 0
	}
	// Phi(-b)(1 - e^(l2-l1)) keeps precision when the two terms are close.
	return -math.Exp(l1) * math.Expm1(l2-l1)
}

// GaussianEpsilon returns the smallest eps >= 0 with GaussianDelta(sigma,
// eps) <= delta.
func GaussianEpsilon(sigma, delta float64) (float64, error) {
	if err := checkSigma(sigma); err != nil {
		return 0, fmt.Errorf("GaussianEpsilon: %w", err)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("GaussianEpsilon: %w", err)
	}
	return gaussianEpsilon(sigma, delta), nil
}

func gaussianEpsilon(sigma, delta float64) float64 {
	if gaussianDelta(sigma, 0) <= delta {
		return 0
	}
	lo, hi := 0.0, 1.0
	for gaussianDelta(sigma, hi) > delta {
		lo, hi = hi, 2*hi
		if hi > 1e12 {
			return math.Inf(1)
		}
	}
	// delta(eps) is monotone; bisect to full precision, keeping hi valid.
	for i := 0; i < 200 && hi-lo > 1e-15*hi; i++ {
		mid := 0.5 * (lo + hi)
		if gaussianDelta(sigma, mid) > delta {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// GaussianSigma returns the smallest noise multiplier sigma for which the
// Gaussian mechanism with sensitivity 1 is (eps, delta)-DP, by the exact
// formula of GaussianDelta.
func GaussianSigma(eps, delta float64) (float64, error) {
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("GaussianSigma: %w", err)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("GaussianSigma: %w", err)
	}
	lo, hi := 1.0, 1.0
	for gaussianDelta(hi, eps) > delta {
		lo, hi = hi, 2*hi
		if hi > 1e12 {
			return 0, fmt.Errorf("GaussianSigma: eps = %v, delta = %v: %w", eps, delta, ErrInfeasible)
		}
	}
	for lo == hi || gaussianDelta(lo, eps) <= delta {
		lo /= 2
		if lo < 1e-12 {
			return lo, nil
		}
	}
	for i := 0; i < 200 && hi-lo > 1e-14*hi; i++ {
		mid := math.Sqrt(lo * hi)
		if gaussianDelta(mid, eps) > delta {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// ZCDPRho returns the zero-concentrated DP parameter rho = 1/(2 sigma^2) of
// the Gaussian mechanism with sensitivity 1 and noise multiplier sigma.
func ZCDPRho(sigma float64) float64 { return 1 / (2 * sigma * sigma) }

// ZCDPEpsilon converts rho-zCDP to (eps, delta)-DP with the conversion of
// Canonne, Kamath & Steinke (2020, Prop. 12), optimized over the Rényi
// order; it is never larger than the classic rho + 2 sqrt(rho log(1/delta)).
func ZCDPEpsilon(rho, delta float64) (float64, error) {
	if !(rho > 0) || isInf(rho) {
		return 0, invalidf("ZCDPEpsilon: rho = %v, want finite and > 0", rho)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("ZCDPEpsilon: %w", err)
	}
	f := func(a float64) float64 { return rdpToEps(a*rho, a, delta) }
	// The bound is unimodal in the order; search log(a-1) by golden section
	// around the classic optimum a = 1 + sqrt(log(1/delta)/rho).
	a0 := 1 + math.Sqrt(math.Log(1/delta)/rho)
	best := goldenMin(func(t float64) float64 { return f(1 + math.Exp(t)) },
		math.Log(a0-1)-8, math.Log(a0-1)+8)
	classic := rho + 2*math.Sqrt(rho*math.Log(1/delta))
	return math.Max(0, math.Min(f(1+math.Exp(best)), classic)), nil
}

// ZCDPDelta returns the delta at which rho-zCDP implies (eps, delta)-DP,
// by the same conversion as ZCDPEpsilon.
func ZCDPDelta(rho, eps float64) (float64, error) {
	if !(rho > 0) || isInf(rho) {
		return 0, invalidf("ZCDPDelta: rho = %v, want finite and > 0", rho)
	}
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("ZCDPDelta: %w", err)
	}
	f := func(t float64) float64 { a := 1 + math.Exp(t); return rdpToLogDelta(a*rho, a, eps) }
	a0 := math.Max(1.01, (eps+rho)/(2*rho))
	best := goldenMin(f, math.Log(a0-1)-8, math.Log(a0-1)+8)
	return math.Min(1, math.Exp(f(best))), nil
}

// goldenMin returns an approximate minimizer of a unimodal f on [a, b].
func goldenMin(f func(float64) float64, a, b float64) float64 {
	const g = 0.6180339887498949
	c, d := b-g*(b-a), a+g*(b-a)
	fc, fd := f(c), f(d)
	for i := 0; i < 100 && b-a > 1e-10; i++ {
		if fc < fd {
			b, d, fd = d, c, fc
			c = b - g*(b-a)
			fc = f(c)
		} else {
			a, c, fc = c, d, fd
			d = a + g*(b-a)
			fd = f(d)
		}
	}
	return 0.5 * (a + b)
}
