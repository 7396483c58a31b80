// Package optimize runs the iterative optimizers behind mfnoise's
// factorizations, in the style of gonum's optimize: one Settings type for
// every method, one Result whose typed Status says why the run ended
// (converged at the gap, stalled, hit the iteration cap, stopped by its
// context), and one argument order, Minimize(ctx, problem, x0, settings,
// method).
//
// Two drivers share the stopping rules. Minimize is L-BFGS (Nocedal and
// Wright, Alg. 7.4) with a backtracking line search, for smooth objectives
// over large vectors: every vector operation is split over GOMAXPROCS
// goroutines with partial sums added in a fixed order, so a run gives the
// same iterates however it is scheduled. Iterate drives any other
// iteration (a fixed point, say) through the same settings, progress
// reports and statuses.
//
// A method proves a lower bound when it has one (a dual feasible point);
// it then stops at Converged once the relative gap (best loss - bound) /
// best loss is at most Settings.Gap, and the gap is a certificate: the
// loss is within that fraction of the optimum. Without a bound a run stops
// at Stalled, when the loss decreased by less than Settings.Rel
// (relative) over the last Settings.Window iterations, which proves
// nothing about the distance to the optimum (a bounded method given
// Settings.Rel stops at whichever comes first, and reports the gap it
// proved).
package optimize

import (
	"fmt"
	"math"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Settings tunes a run. The zero value (and a nil pointer) means defaults.
type Settings struct {
	// Gap is the relative optimality gap (Loss - LowerBound) / Loss at
	// which a method with a lower bound stops; 0 means 1e-4.
	Gap float64
	// Rel is the relative loss decrease over Window iterations below which
	// a run stops as Stalled: for a method without a bound 0 means
	// Gap / 100; a method with a bound stalls only when Rel is set.
	Rel float64
	// Window is the number of iterations Rel is measured over; 0 means 10.
	Window int
	// MaxIter bounds the iterations; 0 means the method's default.
	MaxIter int
	// Progress, if not nil, is called after each iteration.
	Progress func(Progress)
}

// DefaultGap is the relative gap a run stops at when Settings.Gap is 0.
const DefaultGap = 1e-4

// Progress reports one iteration.
type Progress struct {
	Iter int
	// Loss is the objective at the current iterate (+Inf while no feasible
	// point is known); LowerBound the best proven lower bound on the
	// optimum; Gap = (best Loss so far - LowerBound) / best Loss. Methods
	// without a bound report LowerBound = Gap = 0.
	Loss, LowerBound, Gap float64
	// MaxIter is the iteration bound; most runs stop earlier.
	MaxIter int
}

// Status is why a run ended.
type Status int

const (
	// NotTerminated: the run has not ended (never in a returned Result).
	NotTerminated Status = iota
	// Converged: the certified relative gap reached Settings.Gap.
	Converged
	// Stalled: the loss decreased by less than Settings.Rel over
	// Settings.Window iterations (no certificate).
	Stalled
	// NoDescent: the line search found no decrease at working precision
	// even from steepest descent; the iterate is the best found.
	NoDescent
	// IterationLimit: Settings.MaxIter iterations ran without converging.
	IterationLimit
	// Stopped: the context was cancelled or its deadline passed.
	Stopped
)

var statusNames = [...]string{"not terminated", "converged", "stalled", "no descent", "iteration limit", "stopped"}

// String names the status, e.g. "converged".
func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return fmt.Sprintf("Status(%d)", int(s))
	}
	return statusNames[s]
}

// Result is the outcome of a run: the best point, its loss, the best
// lower bound and relative gap (0 without a bound), the iterations used,
// why the run ended, and the wall time. Minimize returns a Result with
// every status but NotTerminated; the caller decides which statuses it
// accepts (Stopped comes with the context's error).
type Result struct {
	X                     []float64
	Loss, LowerBound, Gap float64
	Iterations            int
	Status                Status
	Elapsed               time.Duration
}

// Validate checks the settings: a non-negative gap, tolerance, window and
// iteration bound.
func (set *Settings) Validate() error {
	if set == nil {
		return nil
	}
	if math.IsNaN(set.Gap) || set.Gap < 0 {
		return dpcore.Invalid("optimize", "gap %v must be >= 0", set.Gap)
	}
	if math.IsNaN(set.Rel) || set.Rel < 0 {
		return dpcore.Invalid("optimize", "relative tolerance %v must be >= 0", set.Rel)
	}
	if set.Window < 0 {
		return dpcore.Invalid("optimize", "window %d must be >= 0", set.Window)
	}
	if set.MaxIter < 0 {
		return dpcore.Invalid("optimize", "max iterations %d must be >= 0", set.MaxIter)
	}
	return nil
}

// GapOrDefault is the gap a run stops at: set.Gap, or DefaultGap.
func (set *Settings) GapOrDefault() float64 {
	if set == nil || set.Gap == 0 {
		return DefaultGap
	}
	return set.Gap
}

// MaxIterOr is set.MaxIter, or def when it is 0.
func (set *Settings) MaxIterOr(def int) int {
	if set == nil || set.MaxIter <= 0 {
		return def
	}
	return set.MaxIter
}

func (set *Settings) rel() float64 {
	if set != nil && set.Rel > 0 {
		return set.Rel
	}
	return set.GapOrDefault() / 100
}

func (set *Settings) window() int {
	if set != nil && set.Window > 0 {
		return set.Window
	}
	return 10
}

// Report calls set.Progress with p when both are set.
func (set *Settings) Report(p Progress) {
	if set != nil && set.Progress != nil {
		set.Progress(p)
	}
}

// RelGap is the relative gap max(0, (loss - bound) / loss), 0 for a
// non-positive loss.
func RelGap(loss, bound float64) float64 {
	if loss <= 0 {
		return 0
	}
	return math.Max(0, (loss-bound)/loss)
}
