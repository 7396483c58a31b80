package accountant

import (
	"fmt"
	"math"
)

// DiscreteGaussianSigmaV1 returns the noise multiplier dpmf's planner chose
// for the discrete Gaussian before issue 43: zCDP alone, converted by a
// golden-section search over Rényi orders. It is kept bit for bit so that
// a store whose noise was drawn at it reopens with that noise (package
// aggregate); nothing new is calibrated with it. The search could stop on
// the wrong branch of the bound and so overstate delta, never understate
// it: the multiplier meets its target, by DiscreteGaussianEpsilon too.
func DiscreteGaussianSigmaV1(eps, delta float64) (float64, error) {
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianSigmaV1: %w", err)
	}
	if eps == 0 {
		return 0, fmt.Errorf("DiscreteGaussianSigmaV1: eps = 0: %w", ErrInfeasible)
	}
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("DiscreteGaussianSigmaV1: %w", err)
	}
	return smallestSigma("DiscreteGaussianSigmaV1", eps, delta, func(s float64) float64 { return zcdpEpsilonV1(ZCDPRho(s), delta) })
}

// zcdpEpsilonV1 is the conversion of DiscreteGaussianSigmaV1.
func zcdpEpsilonV1(rho, delta float64) float64 {
	f := func(a float64) float64 { return rdpToEps(a*rho, a, delta) }
	a0 := 1 + math.Sqrt(math.Log(1/delta)/rho)
	best := goldenMinV1(func(t float64) float64 { return f(1 + math.Exp(t)) },
		math.Log(a0-1)-8, math.Log(a0-1)+8)
	classic := rho + 2*math.Sqrt(rho*math.Log(1/delta))
	return math.Max(0, math.Min(f(1+math.Exp(best)), classic))
}

// goldenMinV1 is the golden-section search of zcdpEpsilonV1.
func goldenMinV1(f func(float64) float64, a, b float64) float64 {
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
