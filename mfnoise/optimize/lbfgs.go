package optimize

import (
	"context"
	"math"
)

// Problem is a smooth objective for Minimize.
type Problem struct {
	// Func returns the objective at x and, when grad is not nil, writes
	// its gradient to grad. A non-finite value (+Inf, NaN) marks x as
	// outside the domain: the line search backs off from it.
	Func func(x, grad []float64) float64
	// Precondition, if not nil, applies the initial inverse Hessian H0 to
	// d in place: a positive semidefinite map (a diagonal, possibly
	// followed by a projection onto the subspace the iterates keep to).
	// Weight, when not nil, is H0's diagonal, used for the scaling
	// s^T y / y^T H0 y of the first correction. nil means the identity.
	Precondition func(d []float64)
	Weight       []float64
	// Accepted, if not nil, is called with each accepted iterate x, right
	// after Func evaluated it with its gradient (and before the next
	// direction), so a problem can refresh state that depends on the point
	// (Precondition's diagonal, say).
	Accepted func(x []float64)
	// Bound, if not nil, returns a proven lower bound on the minimum,
	// computed from the last evaluation of Func with a gradient (which is
	// at the current iterate when Minimize calls it). Minimize calls it
	// every BoundEvery iterations (0 means 25) and at the iteration cap,
	// and stops at Converged once the relative gap reaches Settings.Gap.
	// A Bound error skips that bound. A problem with Bound stops as
	// Stalled only when Settings.Rel is set (and then with the bound at
	// the point returned).
	Bound      func(ctx context.Context) (float64, error)
	BoundEvery int
	// BoundStall, when positive, is for a Bound that costs many
	// iterations: a bound is then computed only once the loss decreased
	// by at most BoundStall (relative) over the last BoundEvery
	// iterations, and each later one only after a further max(BoundEvery,
	// i c) iterations (i: the iteration of the last bound), so the bounds
	// of a run are few (besides the final one). The fraction c is
	// (gap/Gap)^(1/4) - 1 for the gap certified so far, within [1/20,
	// 1/2]: a far miss waits half again the iterations, a near miss is
	// retried soon (the banded bound's gap fell as i^-5 to i^-8, so c is
	// long enough to certify the target). The schedule depends on the
	// iterates alone, so a run is as deterministic as its objective.
	BoundStall float64
	// FirstStep, if not nil, is the trial step along the first direction
	// d from x (and after a reset of the memory); nil means 1/||d||.
	FirstStep func(x, d []float64) float64
}

// LBFGS is the limited-memory BFGS method. The zero value (and nil) means
// defaults.
type LBFGS struct {
	// Store is the number of correction pairs kept; 0 means 10.
	Store int
}

// DefaultMaxIter bounds the iterations when neither Settings.MaxIter nor
// the method sets a bound.
const DefaultMaxIter = 20000

// Minimize minimizes p.Func from x0 (not modified) by L-BFGS with an
// Armijo backtracking line search (unit trial step once the memory holds
// a pair, halved up to 60 times). When no step decreases the loss, the
// memory is dropped and steepest descent (through Precondition) tried;
// when that fails too the run ends as NoDescent at the best point. The
// Result holds the best point, its loss and, when p has a Bound, the best
// bound and gap. Stopped comes with ctx's error; an objective that is not
// finite at x0 is an error.
func Minimize(ctx context.Context, p Problem, x0 []float64, set *Settings, method *LBFGS) (*Result, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	if p.Func == nil {
		return nil, errNoFunc
	}
	store := 10
	if method != nil && method.Store > 0 {
		store = method.Store
	}
	every := p.BoundEvery
	if every <= 0 {
		every = 25
	}
	dim := len(x0)
	m := newMonitor(set, set.MaxIterOr(DefaultMaxIter), p.Bound != nil)
	x := append([]float64(nil), x0...)
	if dim == 0 {
		loss := p.Func(x, nil)
		m.observe(loss, math.Inf(-1))
		m.status = Converged
		if m.bounded {
			m.bound = loss
		}
		return m.result(x), nil
	}
	g := make([]float64, dim)
	loss := p.Func(x, g)
	if !finite(loss) {
		return nil, errNotFinite
	}
	m.best = loss
	if p.Accepted != nil {
		p.Accepted(x)
	}
	mem := newMemory(store, dim, p.Precondition, p.Weight)
	xt := make([]float64, dim)
	gt := make([]float64, dim)
	d := make([]float64, dim)
	bound := func() {
		if lb, err := p.Bound(ctx); err == nil {
			m.bound = math.Max(m.bound, lb)
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			m.status = Stopped
			return m.result(x), err
		}
		if m.bounded && (m.iter == m.maxIter || boundDue(m, every, p.BoundStall)) {
			bound()
			if m.check(); m.status != NotTerminated {
				break
			}
		}
		if m.iter == m.maxIter {
			m.status = IterationLimit
			break
		}
		m.iter++
		mem.direction(d, g)
		slope := dot(g, d)
		if !(slope < 0) {
			mem.reset()
			mem.direction(d, g)
			slope = dot(g, d)
		}
		step := 1.0
		if mem.len() == 0 {
			if p.FirstStep != nil {
				step = p.FirstStep(x, d)
			} else if nd := math.Sqrt(dot(d, d)); nd > 0 {
				step = 1 / nd
			}
		}
		accepted := false
		var lt float64
		for try := 0; try < 60 && slope < 0; try++ {
			addScaledTo(xt, x, step, d)
			lt = p.Func(xt, gt)
			if finite(lt) && lt <= loss+1e-4*step*slope {
				accepted = true
				break
			}
			step *= 0.5
		}
		if !accepted {
			// Restore the problem's state at x (the last evaluation was
			// a rejected trial point).
			p.Func(x, g)
			if mem.len() > 0 {
				// A stale curvature model can point nowhere useful:
				// retry from steepest descent once before giving up.
				mem.reset()
				continue
			}
			if m.bounded {
				bound()
			}
			m.status = NoDescent
			break
		}
		subTo(d, xt, x) // d becomes s = x_new - x
		subTo(g, gt, g) // g becomes y = g_new - g
		mem.push(d, g)
		x, xt = xt, x
		g, gt = gt, g
		loss = lt
		if p.Accepted != nil {
			p.Accepted(x)
		}
		m.observe(loss, math.Inf(-1))
		m.report(loss)
		// The last bound still holds and the loss went down: the gap it
		// certifies may have reached the target between bounds.
		if m.bounded && m.gap() <= m.target {
			m.status = Converged
			break
		}
		if m.checkStall(); m.status != NotTerminated {
			if m.bounded {
				// The certificate of the point returned.
				bound()
				if m.gap() <= m.target {
					m.status = Converged
				}
			}
			break
		}
	}
	return m.result(x), nil
}

// boundDue says whether Minimize computes a bound at this iteration: every
// every iterations, or with stall > 0 once the loss decreased by at most
// stall (relative) over the last every iterations and max(every, i c)
// iterations have passed since the last bound (at iteration i; c from
// boundSpacing).
func boundDue(m *monitor, every int, stall float64) bool {
	if stall <= 0 {
		return m.iter%every == 0
	}
	h := m.hist
	if len(h) <= every || m.iter-m.lastBound < max(every, int(float64(m.lastBound)*boundSpacing(m.gap(), m.target))) {
		return false
	}
	last := h[len(h)-1]
	if h[len(h)-1-every]-last > stall*math.Abs(last) {
		return false
	}
	m.lastBound = m.iter
	return true
}

// boundSpacing is the fraction of the iterations so far that Minimize
// waits after a bound that certified gap when it aims at target:
// (gap/target)^(1/4) - 1 within [1/20, 1/2] (1/2 without a bound).
func boundSpacing(gap, target float64) float64 {
	if !(gap < math.Inf(1)) || !(target > 0) {
		return 0.5
	}
	return min(0.5, max(0.05, math.Pow(gap/target, 0.25)-1))
}

func finite(v float64) bool { return !math.IsInf(v, 0) && !math.IsNaN(v) }
