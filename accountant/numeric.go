package accountant

import "math"

// logErfc returns log(erfc(x)) without underflow for large x.
func logErfc(x float64) float64 {
	if x < 25 {
		return math.Log(math.Erfc(x))
	}
	// Asymptotic series erfc(x) = exp(-x^2)/(x sqrt(pi)) * sum_k (-1)^k (2k-1)!!/(2x^2)^k;
	// at x >= 25 five terms are exact to double precision.
	t := 1 / (2 * x * x)
	s, term := 1.0, 1.0
	for k := 1; k <= 6; k++ {
		term *= -float64(2*k-1) * t
		s += term
	}
	return -x*x - math.Log(x) - 0.5*math.Log(math.Pi) + math.Log(s)
}

// logNormCDF returns log Phi(z) for the standard normal CDF Phi.
func logNormCDF(z float64) float64 { return math.Log(0.5) + logErfc(-z/math.Sqrt2) }

// normCDF returns Phi(z), accurate in the lower tail.
func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// normTail returns the z >= 0 with 1 - Phi(z) = tau, for tau in (0, 1/2].
// math.Erfcinv loses all precision below 1e-16, which is exactly where
// truncation masses live, so this inverts the log-domain tail by bisection.
func normTail(tau float64) float64 {
	if tau >= 0.5 {
		return 0
	}
	lt := math.Log(tau)
	lo, hi := 0.0, 1.0
	for logNormCDF(-hi) > lt {
		hi *= 2
	}
	for i := 0; i < 200 && hi-lo > 1e-13*hi; i++ {
		mid := 0.5 * (lo + hi)
		if logNormCDF(-mid) > lt {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// logAddExp returns log(e^a + e^b).
func logAddExp(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	if math.IsInf(b, -1) {
		return a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// logSubExp returns log(e^a - e^b) for a >= b; -Inf when b >= a, which is
// where rounding has erased the difference.
func logSubExp(a, b float64) float64 {
	if math.IsInf(b, -1) {
		return a
	}
	if b >= a {
		return math.Inf(-1)
	}
	return a + math.Log(-math.Expm1(b-a))
}
