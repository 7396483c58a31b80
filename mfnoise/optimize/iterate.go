package optimize

import (
	"context"
	"math"
	"time"
)

// Iteration is a method Iterate drives: Step performs iteration iter
// (counted from 1) and returns the loss of its iterate and a lower bound on
// the optimum (-Inf when it proves none).
type Iteration struct {
	// MaxIter bounds the iterations when Settings.MaxIter is 0; 0 means
	// DefaultMaxIter.
	MaxIter int
	// Bounded says the method proves lower bounds: it stops at Converged
	// when the gap reaches Settings.Gap, never at Stalled.
	Bounded bool
	Step    func(iter int) (loss, bound float64, err error)
}

// Iterate runs it.Step until the gap reaches s's (Converged, for a bounded
// method), the loss stalls (Stalled, otherwise), s's iteration bound is
// reached (IterationLimit) or ctx is done (Stopped, returned with ctx's
// error). An error from Step ends the run with that error. The Result
// holds the best loss and bound, not a point (X is nil): the method keeps
// its own iterates.
func Iterate(ctx context.Context, it Iteration, set *Settings) (*Result, error) {
	if err := set.Validate(); err != nil {
		return nil, err
	}
	def := it.MaxIter
	if def <= 0 {
		def = DefaultMaxIter
	}
	m := newMonitor(set, set.MaxIterOr(def), it.Bounded)
	for m.status == NotTerminated {
		if err := ctx.Err(); err != nil {
			m.status = Stopped
			return m.result(nil), err
		}
		if m.iter == m.maxIter {
			m.status = IterationLimit
			break
		}
		m.iter++
		loss, bound, err := it.Step(m.iter)
		if err != nil {
			return m.result(nil), err
		}
		m.observe(loss, bound)
		m.report(loss)
		m.check()
	}
	return m.result(nil), nil
}

// monitor keeps the best loss and bound of a run and applies the stopping
// rules Iterate and Minimize share.
type monitor struct {
	set           *Settings
	maxIter, iter int
	bounded       bool
	target, rel   float64
	window        int
	best, bound   float64
	hist          []float64
	status        Status
	start         time.Time
	// stallBounded applies the stall rule to a bounded method too
	// (Settings.Rel set).
	stallBounded bool
	// lastBound is the iteration of the last scheduled bound (Minimize
	// with Problem.BoundStall).
	lastBound int
}

func newMonitor(set *Settings, maxIter int, bounded bool) *monitor {
	return &monitor{
		set: set, maxIter: maxIter, bounded: bounded,
		target: set.GapOrDefault(), rel: set.rel(), window: set.window(),
		best: math.Inf(1), bound: math.Inf(-1), start: time.Now(),
		stallBounded: set != nil && set.Rel > 0,
	}
}

func (m *monitor) observe(loss, bound float64) {
	if loss < m.best {
		m.best = loss
	}
	m.bound = math.Max(m.bound, bound)
	m.hist = append(m.hist, loss)
}

// gap is the relative gap of the best loss to the best bound (+Inf
// without a bound).
func (m *monitor) gap() float64 {
	if math.IsInf(m.bound, -1) || math.IsInf(m.best, 1) {
		return math.Inf(1)
	}
	return RelGap(m.best, m.bound)
}

func (m *monitor) report(loss float64) {
	p := Progress{Iter: m.iter, Loss: loss, MaxIter: m.maxIter}
	if m.bounded {
		p.LowerBound, p.Gap = m.bound, m.gap()
	}
	m.set.Report(p)
}

// check sets Converged when the gap is reached (bounded methods) or
// Stalled when the loss stalls (checkStall).
func (m *monitor) check() {
	if m.bounded && m.gap() <= m.target {
		m.status = Converged
		return
	}
	m.checkStall()
}

// checkStall sets Stalled when the loss decreased by at most rel over the
// window, for methods without a bound and for bounded ones whose settings
// set Rel.
func (m *monitor) checkStall() {
	if m.bounded && !m.stallBounded {
		return
	}
	if h := m.hist; len(h) > m.window {
		last := h[len(h)-1]
		if h[len(h)-1-m.window]-last <= m.rel*math.Abs(last) {
			m.status = Stalled
		}
	}
}

func (m *monitor) result(x []float64) *Result {
	r := &Result{X: x, Loss: m.best, Iterations: m.iter, Status: m.status, Elapsed: time.Since(m.start)}
	if m.bounded {
		r.LowerBound, r.Gap = m.bound, m.gap()
	}
	return r
}
