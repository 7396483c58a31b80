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

// The zCDP conversion (Canonne, Kamath & Steinke 2020, Prop. 12): rho-zCDP
// bounds the Rényi divergence of every order a = 1 + u > 1 by a rho, and
// an order-a bound converts to (eps, delta) with
//
//	log delta = g(u) = u ((1+u) rho - eps) + u log(u/(1+u)) - log(1+u),
//	eps = e(u) = (1+u) rho + log(u/(1+u)) - (log delta + log(1+u))/u.
//
// The bound is the best over the order: g is strictly convex in u (g'' =
// 2 rho + 1/(u(1+u)) > 0), so its minimum is the one root of
//
//	g'(u) = (1+2u) rho - eps + log(u/(1+u)) = 0,
//
// and e has one stationary point, the root of rho u^2 + log(1+u) = log
// (1/delta) (e' has the sign of that difference). Both roots are found by
// bisection on a monotone function, so the optimum is global (a golden
// section search over the order found a local one). With it, the
// divergence of order 1 (KL <= rho) gives delta <= sqrt(1 - e^-rho)
// (Bretagnolle-Huber), used when smaller.

// logRatio returns log(u/(1+u)) for u > 0 without cancellation.
func logRatio(u float64) float64 {
	if u < 1 {
		return math.Log(u) - math.Log1p(u)
	}
	return -math.Log1p(1 / u)
}

// rootIncreasing returns the root of the increasing function f of u > 0
// (f(0+) < 0 < f(inf)), to a relative 1e-15, by bisection in log u.
func rootIncreasing(f func(u float64) float64) float64 {
	lo, hi := -1.0, 1.0 // log u
	for f(math.Exp(lo)) > 0 && lo > -745 {
		lo *= 2
	}
	for f(math.Exp(hi)) < 0 && hi < 709 {
		hi *= 2
	}
	for i := 0; i < 400 && hi-lo > 1e-15*math.Max(1, math.Abs(lo)); i++ {
		mid := 0.5 * (lo + hi)
		if f(math.Exp(mid)) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Exp(0.5 * (lo + hi))
}

// ZCDPEpsilon converts rho-zCDP to (eps, delta)-DP with the conversion of
// Canonne, Kamath & Steinke (2020, Prop. 12) at its optimal Rényi order,
// or 0 when the KL bound already gives delta (Bretagnolle-Huber). It is
// never larger than the classic rho + 2 sqrt(rho log(1/delta)).
func ZCDPEpsilon(rho, delta float64) (float64, error) {
	if !(rho > 0) || isInf(rho) {
		return 0, invalidf("ZCDPEpsilon: rho = %v, want finite and > 0", rho)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("ZCDPEpsilon: %w", err)
	}
	if delta*delta >= -math.Expm1(-rho) {
		return 0, nil
	}
	ld := math.Log(delta)
	u := rootIncreasing(func(u float64) float64 { return rho*u*u + math.Log1p(u) + ld })
	eps := (1+u)*rho + logRatio(u) - (ld+math.Log1p(u))/u
	classic := rho + 2*math.Sqrt(-rho*ld)
	return math.Max(0, math.Min(eps, classic)), nil
}

// ZCDPDelta returns the delta at which rho-zCDP implies (eps, delta)-DP,
// by the same conversion as ZCDPEpsilon: the smaller of Prop. 12 at its
// optimal order and sqrt(1 - e^-rho).
func ZCDPDelta(rho, eps float64) (float64, error) {
	if !(rho > 0) || isInf(rho) {
		return 0, invalidf("ZCDPDelta: rho = %v, want finite and > 0", rho)
	}
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("ZCDPDelta: %w", err)
	}
	u := rootIncreasing(func(u float64) float64 { return (1+2*u)*rho - eps + logRatio(u) })
	g := u*((1+u)*rho-eps) + u*logRatio(u) - math.Log1p(u)
	bh := math.Sqrt(-math.Expm1(-rho))
	return math.Min(1, math.Min(bh, math.Exp(g))), nil
}
