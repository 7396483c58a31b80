package optimize

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"
)

// quadratic is f(x) = sum_i d_i (x_i - 1)^2 / 2 with d_i spread over four
// orders of magnitude: minimum 0 at x = 1.
func quadratic(n int) Problem {
	d := make([]float64, n)
	for i := range d {
		d[i] = math.Pow(10, 4*float64(i)/float64(max(1, n-1)))
	}
	return Problem{Func: func(x, g []float64) float64 {
		f := 0.0
		for i, v := range x {
			f += d[i] * (v - 1) * (v - 1) / 2
			if g != nil {
				g[i] = d[i] * (v - 1)
			}
		}
		return f
	}}
}

// rosenbrock is the extended Rosenbrock function, minimum 0 at x = 1.
func rosenbrock(x, g []float64) float64 {
	f := 0.0
	for i := range g {
		g[i] = 0
	}
	for i := 0; i+1 < len(x); i += 2 {
		a, b := 1-x[i], x[i+1]-x[i]*x[i]
		f += a*a + 100*b*b
		if g != nil {
			g[i] += -2*a - 400*x[i]*b
			g[i+1] += 200 * b
		}
	}
	return f
}

func TestMinimizeRosenbrockConverges(t *testing.T) {
	x0 := make([]float64, 20)
	for i := range x0 {
		x0[i] = -1.2
		if i%2 == 1 {
			x0[i] = 1
		}
	}
	res, err := Minimize(context.Background(), Problem{Func: rosenbrock}, x0, &Settings{Rel: 1e-14, Window: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Stalled && res.Status != NoDescent {
		t.Fatalf("status %v, want stalled or no descent", res.Status)
	}
	for i, v := range res.X {
		if math.Abs(v-1) > 1e-4 {
			t.Fatalf("x[%d] = %v, want 1 (loss %g after %d iterations, %v)", i, v, res.Loss, res.Iterations, res.Status)
		}
	}
	if x0[0] != -1.2 {
		t.Fatal("Minimize modified x0")
	}
}

func TestMinimizeIterationLimit(t *testing.T) {
	x0 := make([]float64, 50)
	res, err := Minimize(context.Background(), quadratic(50), x0, &Settings{MaxIter: 3, Rel: 1e-300}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != IterationLimit || res.Iterations != 3 {
		t.Fatalf("status %v after %d iterations, want iteration limit after 3", res.Status, res.Iterations)
	}
}

func TestMinimizeStoppedByContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := quadratic(50)
	calls := 0
	f := p.Func
	p.Func = func(x, g []float64) float64 {
		if calls++; calls == 4 {
			cancel()
		}
		return f(x, g)
	}
	res, err := Minimize(ctx, p, make([]float64, 50), &Settings{Rel: 1e-300}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if res == nil || res.Status != Stopped {
		t.Fatalf("result %+v, want status stopped", res)
	}
	if res.Loss >= f(make([]float64, 50), nil) {
		t.Fatalf("stopped run did not keep its progress: loss %g", res.Loss)
	}
}

// TestMinimizeBoundConverges gives the quadratic plus 1 its exact lower
// bound 1: the run must stop at Converged with a gap no larger than asked,
// the gap must be the certificate (loss - bound) / loss, and the loss must
// lie within that gap of the optimum.
func TestMinimizeBoundConverges(t *testing.T) {
	q := quadratic(30)
	p := Problem{
		Func:       func(x, g []float64) float64 { return q.Func(x, g) + 1 },
		Bound:      func(context.Context) (float64, error) { return 1, nil },
		BoundEvery: 1,
	}
	res, err := Minimize(context.Background(), p, make([]float64, 30), &Settings{Gap: 1e-6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Converged || res.Gap > 1e-6 {
		t.Fatalf("status %v at gap %g, want converged at gap <= 1e-6", res.Status, res.Gap)
	}
	if got := RelGap(res.Loss, res.LowerBound); got != res.Gap || res.LowerBound != 1 {
		t.Fatalf("gap %g, bound %g; want (loss - 1) / loss = %g", res.Gap, res.LowerBound, got)
	}
	if res.Loss-1 > 1e-6*res.Loss {
		t.Fatalf("loss %v is not within the gap of the optimum 1", res.Loss)
	}
}

// TestMinimizeSameOnAnyCores checks the iterates do not depend on
// GOMAXPROCS: the reductions add block sums in block order.
func TestMinimizeSameOnAnyCores(t *testing.T) {
	n := 3*vecBlock + 17
	run := func(procs int) *Result {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		res, err := Minimize(context.Background(), quadratic(n), make([]float64, n), &Settings{MaxIter: 20, Rel: 1e-300}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := run(1), run(4)
	if a.Loss != b.Loss || a.Iterations != b.Iterations {
		t.Fatalf("GOMAXPROCS 1: loss %v in %d iterations; 4: %v in %d", a.Loss, a.Iterations, b.Loss, b.Iterations)
	}
	for i := range a.X {
		if a.X[i] != b.X[i] {
			t.Fatalf("x[%d] differs: %v and %v", i, a.X[i], b.X[i])
		}
	}
}

func TestIterateStatuses(t *testing.T) {
	// A sequence whose loss is 1 + 2^-k and whose bound is 1 - 2^-k: the
	// gap falls below 1e-3 at k = 11.
	step := func(k int) (float64, float64, error) {
		e := math.Pow(2, -float64(k))
		return 1 + e, 1 - e, nil
	}
	res, err := Iterate(context.Background(), Iteration{Bounded: true, MaxIter: 100, Step: step}, &Settings{Gap: 1e-3})
	if err != nil || res.Status != Converged || res.Iterations != 11 {
		t.Fatalf("got %+v, %v; want converged after 11 iterations", res, err)
	}
	res, err = Iterate(context.Background(), Iteration{Bounded: true, Step: step}, &Settings{Gap: 1e-3, MaxIter: 5})
	if err != nil || res.Status != IterationLimit || res.Iterations != 5 {
		t.Fatalf("got %+v, %v; want iteration limit after 5", res, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err = Iterate(ctx, Iteration{Bounded: true, Step: func(k int) (float64, float64, error) {
		if k == 3 {
			cancel()
		}
		return step(k)
	}}, &Settings{Gap: 1e-12})
	if !errors.Is(err, context.Canceled) || res.Status != Stopped || res.Iterations != 3 {
		t.Fatalf("got %+v, %v; want stopped after 3 with context.Canceled", res, err)
	}
	// Without a bound: stalled once the loss moves by less than Rel over
	// the window.
	res, err = Iterate(context.Background(), Iteration{Step: step}, &Settings{Rel: 1e-3, Window: 2})
	if err != nil || res.Status != Stalled || res.Gap != 0 {
		t.Fatalf("got %+v, %v; want stalled without a gap", res, err)
	}
	boom := errors.New("boom")
	if _, err := Iterate(context.Background(), Iteration{Step: func(int) (float64, float64, error) { return 0, 0, boom }}, nil); !errors.Is(err, boom) {
		t.Fatalf("error %v, want the step's", err)
	}
}

func TestStatusString(t *testing.T) {
	for s, want := range map[Status]string{
		NotTerminated: "not terminated", Converged: "converged", Stalled: "stalled",
		NoDescent: "no descent", IterationLimit: "iteration limit", Stopped: "stopped", Status(42): "Status(42)",
	} {
		if got := s.String(); got != want {
			t.Errorf("Status(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	for _, set := range []*Settings{{Gap: -1}, {Gap: math.NaN()}, {Rel: -1}, {Window: -1}, {MaxIter: -1}} {
		if _, err := Minimize(context.Background(), quadratic(2), []float64{0, 0}, set, nil); err == nil {
			t.Errorf("settings %+v accepted", *set)
		}
	}
	if _, err := Minimize(context.Background(), Problem{}, []float64{0}, nil, nil); err == nil {
		t.Error("a problem without an objective was accepted")
	}
	inf := Problem{Func: func(x, g []float64) float64 { return math.Inf(1) }}
	if _, err := Minimize(context.Background(), inf, []float64{0}, nil, nil); err == nil {
		t.Error("a start with an infinite objective was accepted")
	}
}

// A bound computed once (BoundEvery far away) certifies the gap as soon
// as the loss falls within it: the run stops there, not at the next
// bound.
func TestMinimizeConvergesBetweenBounds(t *testing.T) {
	q := quadratic(30)
	p := Problem{
		Func:       func(x, g []float64) float64 { return q.Func(x, g) + 1 },
		Bound:      func(context.Context) (float64, error) { return 1, nil },
		BoundEvery: 1000,
	}
	res, err := Minimize(context.Background(), p, make([]float64, 30), &Settings{Gap: 1e-6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != Converged || res.Gap > 1e-6 || res.Iterations >= 1000 {
		t.Fatalf("%v at gap %g after %d iterations, want converged before the next bound", res.Status, res.Gap, res.Iterations)
	}
}

// The wait after a bound shrinks with the gap it left: half again the
// iterations for a far miss (and before any bound), a twentieth for a
// near one.
func TestBoundSpacing(t *testing.T) {
	for _, tc := range []struct{ gap, target, want float64 }{
		{math.Inf(1), 1e-3, 0.5},
		{0.137, 1e-3, 0.5},
		{7.4e-3, 1e-3, 0.5},
		{2e-3, 1e-3, math.Pow(2, 0.25) - 1},
		{1.08e-3, 1e-3, 0.05},
		{1e-3, 0, 0.5},
	} {
		if got := boundSpacing(tc.gap, tc.target); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("boundSpacing(%v, %v) = %v, want %v", tc.gap, tc.target, got, tc.want)
		}
	}
}
