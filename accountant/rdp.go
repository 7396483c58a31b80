package accountant

import (
	"fmt"
	"math"
	"slices"
)

// An Accountant computes the (eps, delta) guarantee of an Event.
type Accountant interface {
	// Name identifies the accounting method in ledgers.
	Name() string
	// Epsilon returns the smallest eps the accountant can certify at
	// delta, +Inf if it can certify none (for PLD, when delta is below
	// the truncated tail mass).
	Epsilon(e Event, delta float64) (float64, error)
	// Delta returns the smallest delta the accountant can certify at eps.
	Delta(e Event, eps float64) (float64, error)
}

// DefaultRDPOrders returns the Rényi orders NewRDP uses when given none:
// the grid of dp_accounting and Opacus (1.1 to 10.9 by 0.1, then every
// integer to 63), extended with large orders for very small delta.
func DefaultRDPOrders() []float64 {
	var o []float64
	for x := 1; x < 100; x++ {
		o = append(o, 1+float64(x)/10)
	}
	for a := 11; a < 64; a++ {
		o = append(o, float64(a))
	}
	return append(o, 80, 96, 128, 192, 256, 384, 512, 1024)
}

type rdpAccountant struct{ orders []float64 }

// NewRDP returns a Rényi-DP accountant evaluating the given orders (all
// > 1); nil means DefaultRDPOrders. Invalid orders are reported when
// accounting.
func NewRDP(orders []float64) Accountant {
	if orders == nil {
		orders = DefaultRDPOrders()
	}
	return &rdpAccountant{orders: slices.Clone(orders)}
}

func (r *rdpAccountant) Name() string { return "rdp" }

func (r *rdpAccountant) checkOrders() error {
	if len(r.orders) == 0 {
		return invalidf("rdp: no orders")
	}
	for _, a := range r.orders {
		if !(a > 1) || isInf(a) {
			return invalidf("rdp: order %v, want finite and > 1", a)
		}
	}
	return nil
}

// rdp returns the Rényi divergence bound of e at each order.
func (r *rdpAccountant) rdp(e Event) ([]float64, error) {
	if err := r.checkOrders(); err != nil {
		return nil, err
	}
	comps, err := components(e)
	if err != nil {
		return nil, fmt.Errorf("rdp: %w", err)
	}
	for _, c := range comps {
		if c.alloc > 1 {
			return nil, fmt.Errorf("accountant: rdp: random allocation: use the PLD accountant: %w", ErrUnsupported)
		}
	}
	out := make([]float64, len(r.orders))
	for i, a := range r.orders {
		for _, c := range comps {
			out[i] += float64(c.count) * subsampledGaussianRDP(c.q, c.sigma, a)
		}
	}
	return out, nil
}

func (r *rdpAccountant) Epsilon(e Event, delta float64) (float64, error) {
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("rdp: %w", err)
	}
	rdp, err := r.rdp(e)
	if err != nil {
		return 0, err
	}
	best := math.Inf(1)
	for i, a := range r.orders {
		best = math.Min(best, rdpToEps(rdp[i], a, delta))
	}
	return best, nil
}

func (r *rdpAccountant) Delta(e Event, eps float64) (float64, error) {
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("rdp: %w", err)
	}
	rdp, err := r.rdp(e)
	if err != nil {
		return 0, err
	}
	best := 0.0
	for i, a := range r.orders {
		best = math.Min(best, rdpToLogDelta(rdp[i], a, eps))
	}
	return math.Exp(best), nil
}

// rdpToEps converts an order-a Rényi bound to eps at delta with the bound
// of Canonne, Kamath & Steinke (2020, Prop. 12) / Asoodeh et al. (2020),
// which is what dp_accounting uses.
func rdpToEps(rdp, a, delta float64) float64 {
	if math.IsNaN(rdp) || math.IsInf(rdp, 1) {
		return math.Inf(1)
	}
	// KL <= rdp and TV <= sqrt(1 - e^-KL) (Bretagnolle-Huber): eps = 0.
	if delta*delta+math.Expm1(-rdp) >= 0 {
		return 0
	}
	if a <= 1.01 {
		// The bound is numerically unstable this close to order 1 and
		// never the best there.
		return math.Inf(1)
	}
	eps := rdp + math.Log1p(-1/a) - (math.Log(delta)+math.Log(a))/(a-1)
	return math.Max(0, eps)
}

// rdpToLogDelta is the inverse of rdpToEps: log delta at eps.
func rdpToLogDelta(rdp, a, eps float64) float64 {
	if math.IsNaN(rdp) || math.IsInf(rdp, 1) {
		return 0
	}
	ld := 0.5 * math.Log1p(-math.Exp(-rdp))
	if a > 1.01 {
		ld = math.Min(ld, (a-1)*(rdp-eps+math.Log1p(-1/a))-math.Log(a))
	}
	return math.Min(0, ld)
}

// subsampledGaussianRDP returns the order-a Rényi divergence of the
// Poisson-subsampled Gaussian mechanism (Mironov, Talwar & Zhang 2019):
// an exact binomial expansion at integer orders and their convergent series
// at fractional ones, both in log space.
func subsampledGaussianRDP(q, sigma, a float64) float64 {
	if q == 1 {
		return a / (2 * sigma * sigma)
	}
	if a != math.Floor(a) && sigma > 1e3 && a < 1<<20 {
		// The series of logAFrac alternates, and its terms decay only
		// past about sigma of them: at large multipliers it cancels to
		// garbage (0 at q 0.5, sigma 1e8). The divergence is
		// nondecreasing in the order, so the next integer order bounds it.
		return subsampledGaussianRDP(q, sigma, math.Ceil(a))
	}
	var logA float64
	if a == math.Floor(a) && a < 1<<20 {
		logA = logAInt(q, sigma, int(a))
	} else {
		logA = logAFrac(q, sigma, a)
	}
	// logA is a sum of terms near 1 whose logs come from Lgamma (up to
	// a log a): its rounding error is about 1e-16 (a log a + a). At large
	// multipliers the divergence itself is smaller (q^2 a / (2 sigma^2)),
	// and rounding could give 0, which rdpToEps turns into epsilon 0: a
	// claim that does not hold. Where the error is not negligible (below
	// 1e-6 of logA) the bound adds it; elsewhere the value is left as it
	// was computed, so calibrated multipliers (recorded in checkpoints)
	// do not move.
	lgA, _ := math.Lgamma(a + 1)
	if slack := 0x1p-44 * (lgA + a + 1); logA < 1e6*slack {
		logA += slack
	}
	return math.Max(0, logA) / (a - 1)
}

func logAInt(q, sigma float64, a int) float64 {
	lq, l1q := math.Log(q), math.Log1p(-q)
	s2 := 2 * sigma * sigma
	la := math.Inf(-1)
	lgA, _ := math.Lgamma(float64(a) + 1)
	for k := 0; k <= a; k++ {
		lgk, _ := math.Lgamma(float64(k) + 1)
		lgak, _ := math.Lgamma(float64(a-k) + 1)
		kf := float64(k)
		t := lgA - lgk - lgak + float64(a-k)*l1q + kf*lq + (kf*kf-kf)/s2
		la = logAddExp(la, t)
	}
	return la
}

func logAFrac(q, sigma, a float64) float64 {
	lq, l1q := math.Log(q), math.Log1p(-q)
	s2 := 2 * sigma * sigma
	la0, la1 := math.Inf(-1), math.Inf(-1)
	z0 := sigma*sigma*math.Log(1/q-1) + 0.5
	lgA, _ := math.Lgamma(a + 1)
	for i := 0; i < 100000; i++ {
		fi := float64(i)
		j := a - fi
		lgi, _ := math.Lgamma(fi + 1)
		lgj, sj := math.Lgamma(j + 1)
		lcoef := lgA - lgi - lgj
		t0 := lcoef + fi*lq + j*l1q
		t1 := lcoef + j*lq + fi*l1q
		e0 := math.Log(0.5) + logErfc((fi-z0)/(math.Sqrt2*sigma))
		e1 := math.Log(0.5) + logErfc((z0-j)/(math.Sqrt2*sigma))
		s0 := t0 + (fi*fi-fi)/s2 + e0
		s1 := t1 + (j*j-j)/s2 + e1
		if sj > 0 {
			la0 = logAddExp(la0, s0)
			la1 = logAddExp(la1, s1)
		} else {
			la0 = logSubExp(la0, s0)
			la1 = logSubExp(la1, s1)
		}
		if math.Max(s0, s1) < -30 && fi > a {
			break
		}
	}
	return logAddExp(la0, la1)
}
