package accountant

import (
	"encoding/json"
	"fmt"
	"math"
)

// Private selection: run a mechanism a random number K of times and
// release only the best run (Liu & Talwar 2019; Papernot & Steinke 2022,
// "Hyperparameter tuning with Renyi differential privacy", ICLR). The
// number of runs is drawn from Repetitions before any run; its law, not
// the runs' outcomes, sets what the selection costs. The Rényi bounds are
// those dp_accounting applies to a RepeatAndSelectDpEvent (PS22 Thm. 2
// for the truncated negative binomial family, Thm. 6 for Poisson);
// docs/math.md §8 states them.

// Repetitions is the law of the number K of runs of private selection:
// a truncated negative binomial with shape Shape (0: logarithmic, 1:
// geometric, in between or above: the family of PS22 Def. 1, K >= 1) or,
// for Shape = +Inf, a Poisson law (K may be 0: nothing is released). Mean
// is E[K], at least 1.
type Repetitions struct {
	Mean  float64
	Shape float64
}

// repetitionsJSON is the wire form: a Poisson law has law "poisson" and
// no shape (JSON has no infinity).
type repetitionsJSON struct {
	Law   string   `json:"law"`
	Mean  float64  `json:"mean"`
	Shape *float64 `json:"shape,omitempty"`
}

// MarshalJSON implements json.Marshaler.
func (r Repetitions) MarshalJSON() ([]byte, error) {
	if r.Poisson() {
		return json.Marshal(repetitionsJSON{Law: "poisson", Mean: r.Mean})
	}
	return json.Marshal(repetitionsJSON{Law: "truncated-negative-binomial", Mean: r.Mean, Shape: &r.Shape})
}

// UnmarshalJSON implements json.Unmarshaler.
func (r *Repetitions) UnmarshalJSON(b []byte) error {
	var w repetitionsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	switch {
	case w.Law == "poisson" && w.Shape == nil:
		*r = PoissonRepetitions(w.Mean)
	case w.Law == "truncated-negative-binomial" && w.Shape != nil:
		*r = Repetitions{Mean: w.Mean, Shape: *w.Shape}
	default:
		return invalidf("selection: repetitions %s: want law poisson, or truncated-negative-binomial with a shape", b)
	}
	return nil
}

// PoissonRepetitions is K ~ Poisson(mean).
func PoissonRepetitions(mean float64) Repetitions {
	return Repetitions{Mean: mean, Shape: math.Inf(1)}
}

// Poisson says K is Poisson distributed.
func (r Repetitions) Poisson() bool { return math.IsInf(r.Shape, 1) }

// String is "poisson(mean 4)" or "tnb(shape 1, mean 4)".
func (r Repetitions) String() string {
	if r.Poisson() {
		return fmt.Sprintf("poisson(mean %g)", r.Mean)
	}
	return fmt.Sprintf("truncated negative binomial(shape %g, mean %g)", r.Shape, r.Mean)
}

// maxDrawMean bounds the E[K] Draw accepts: far above any tuning budget,
// and small enough that drawing K stays cheap.
const maxDrawMean = 1e6

// Check refuses a law the bounds do not cover.
func (r Repetitions) Check() error {
	if !(r.Mean >= 1) || isInf(r.Mean) {
		return invalidf("selection: mean number of runs %v, want finite and >= 1", r.Mean)
	}
	if !(r.Shape >= 0) {
		return invalidf("selection: shape %v, want >= 0 (0 logarithmic, 1 geometric, +Inf Poisson)", r.Shape)
	}
	return nil
}

// tnbMean is the mean of the truncated negative binomial law with shape
// eta and stopping probability gamma in (0, 1]: eta (1/gamma - 1) /
// (1 - gamma^eta), (1/gamma - 1) / log(1/gamma) at eta = 0.
func tnbMean(gamma, eta float64) float64 {
	if gamma == 1 {
		return 1
	}
	lg := math.Log(gamma)
	switch {
	case eta == 1:
		return 1 / gamma
	case eta == 0:
		return -math.Expm1(-lg) / lg // (1/gamma - 1) / log(1/gamma)
	}
	return eta * math.Expm1(-lg) / -math.Expm1(eta*lg)
}

// Gamma is the stopping probability of a truncated negative binomial law
// with this mean: the largest gamma (to relative 1e-12) whose mean is at
// least r.Mean, so that the bounds, which grow as gamma falls, are never
// understated by rounding.
func (r Repetitions) Gamma() (float64, error) {
	if err := r.Check(); err != nil {
		return 0, err
	}
	if r.Poisson() {
		return 0, invalidf("selection: a Poisson law has no gamma")
	}
	if r.Shape == 1 || r.Mean == 1 {
		return 1 / r.Mean, nil
	}
	// The mean falls from +Inf at gamma -> 0 to 1 at gamma = 1; it is at
	// most 2 (eta + 1) / gamma (PS22), so gamma <= 2 (eta + 1) / mean.
	lo, hi := 0.0, math.Min(1, 2*(r.Shape+1)/r.Mean)
	for hi-lo > 1e-12*hi {
		mid := (lo + hi) / 2
		if tnbMean(mid, r.Shape) < r.Mean {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo, nil
}

// Draw draws K with the uniforms in [0, 1) that uniform returns (a
// CSPRNG's: the draw is data independent but must not be predictable
// from the results).
func (r Repetitions) Draw(uniform func() float64) (int, error) {
	if err := r.Check(); err != nil {
		return 0, err
	}
	if r.Mean > maxDrawMean {
		return 0, invalidf("selection: mean number of runs %v, want at most %g", r.Mean, float64(maxDrawMean))
	}
	if r.Poisson() {
		// The arrivals of a unit-rate Poisson process before Mean.
		k, t := 0, 0.0
		for {
			t -= math.Log1p(-uniform())
			if t >= r.Mean {
				return k, nil
			}
			k++
		}
	}
	gamma, err := r.Gamma()
	if err != nil {
		return 0, err
	}
	if gamma >= 1 {
		return 1, nil
	}
	// Inversion: P[K=1] = eta (1-gamma) / (gamma^-eta - 1), or
	// (1-gamma) / log(1/gamma) at eta = 0, and P[K=k+1]/P[K=k] =
	// (1-gamma)(k+eta)/(k+1) (PS22 Def. 1).
	eta := r.Shape
	p := (1 - gamma) / -math.Log(gamma)
	if eta > 0 {
		p = eta * (1 - gamma) / math.Expm1(-eta*math.Log(gamma))
	}
	u := uniform()
	cdf := p
	k := 1
	for u >= cdf && p > 0 {
		p *= (1 - gamma) * (float64(k) + eta) / float64(k+1)
		cdf += p
		k++
	}
	return k, nil
}

// RepeatAndSelectRDP maps the Rényi bounds rdp (at orders, all > 1) of
// one run to those of private selection over K ~ r runs, as dp_accounting
// does for a RepeatAndSelectDpEvent:
//
//   - truncated negative binomial (PS22 Thm. 2): rdp[i] + log(E[K])/(a_i - 1)
//     plus (1+eta) min_j ((1 - 1/a_j) rdp[j] + log(1/gamma)/a_j), then made
//     nondecreasing in the order from above (Rényi divergences are);
//   - Poisson (PS22 Thm. 6): rdp[i] + E[K] deltahat_i + log(E[K])/(a_i - 1),
//     with deltahat_i the delta of one run at epsilon log(1 + 1/(a_i - 1)),
//     converted from rdp over all orders.
func RepeatAndSelectRDP(orders, rdp []float64, r Repetitions) ([]float64, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	if len(orders) != len(rdp) || len(orders) == 0 {
		return nil, invalidf("selection: %d orders and %d bounds", len(orders), len(rdp))
	}
	for i, a := range orders {
		if !(a > 1) || isInf(a) {
			return nil, invalidf("selection: order %v, want finite and > 1", a)
		}
		if !(rdp[i] >= 0) {
			return nil, invalidf("selection: Rényi bound %v at order %v, want >= 0", rdp[i], a)
		}
	}
	out := make([]float64, len(orders))
	logMean := math.Log(r.Mean)
	if r.Poisson() {
		for i, a := range orders {
			epsHat := math.Log1p(1 / (a - 1))
			ld := 0.0
			for j, b := range orders {
				ld = math.Min(ld, rdpToLogDelta(rdp[j], b, epsHat))
			}
			out[i] = rdp[i] + r.Mean*math.Exp(ld) + logMean/(a-1)
		}
		return out, nil
	}
	gamma, err := r.Gamma()
	if err != nil {
		return nil, err
	}
	c := math.Inf(1)
	for j, b := range orders {
		c = math.Min(c, (1-1/b)*rdp[j]-math.Log(gamma)/b)
	}
	c *= 1 + r.Shape
	for i, a := range orders {
		out[i] = rdp[i] + logMean/(a-1) + c
	}
	for i, a := range orders {
		for j, b := range orders {
			if b >= a {
				out[i] = math.Min(out[i], out[j])
			}
		}
	}
	return out, nil
}

// SelectionRDP is the Rényi bound, at orders (nil: DefaultRDPOrders), of
// private selection over K ~ r runs of a mechanism that, at each run,
// picks one of candidates at random (independently of the data) and runs
// it: the bound of one run is the largest of the candidates' at each
// order (a mixture with data-independent weights is no worse than its
// worst component), mapped by RepeatAndSelectRDP. The candidates' events
// must be ones the RDP accountant supports.
func SelectionRDP(candidates []Event, r Repetitions, orders []float64) ([]float64, error) {
	if len(candidates) == 0 {
		return nil, invalidf("selection: no candidates")
	}
	acct := NewRDP(orders).(*rdpAccountant)
	base := make([]float64, len(acct.orders))
	for _, e := range candidates {
		rdp, err := acct.rdp(e)
		if err != nil {
			return nil, fmt.Errorf("selection: %w", err)
		}
		for i := range base {
			base[i] = math.Max(base[i], rdp[i])
		}
	}
	return RepeatAndSelectRDP(acct.orders, base, r)
}

// SelectionEpsilon is the epsilon at delta of private selection
// (SelectionRDP), converted as NewRDP converts.
func SelectionEpsilon(candidates []Event, r Repetitions, delta float64, orders []float64) (float64, error) {
	if err := checkDelta(delta); err != nil {
		return 0, fmt.Errorf("selection: %w", err)
	}
	if orders == nil {
		orders = DefaultRDPOrders()
	}
	sel, err := SelectionRDP(candidates, r, orders)
	if err != nil {
		return 0, err
	}
	return RDPEpsilon(orders, sel, delta)
}

// RDPEpsilon converts Rényi bounds rdp at orders to epsilon at delta as
// NewRDP does (the best order). Bounds of mechanisms run on the same data
// add up at each order (composition), so the sum of several selections'
// SelectionRDP converts to the epsilon of releasing them all.
func RDPEpsilon(orders, rdp []float64, delta float64) (float64, error) {
	if err := checkDelta(delta); err != nil {
		return 0, err
	}
	if len(orders) != len(rdp) || len(orders) == 0 {
		return 0, invalidf("rdp: %d orders and %d bounds", len(orders), len(rdp))
	}
	best := math.Inf(1)
	for i, a := range orders {
		if !(a > 1) || isInf(a) || !(rdp[i] >= 0) {
			return 0, invalidf("rdp: bound %v at order %v", rdp[i], a)
		}
		best = math.Min(best, rdpToEps(rdp[i], a, delta))
	}
	return best, nil
}
