package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// TestFinish: ending a training step with the deferred dense layers
// flushed straight into dst in turn and the sum dealt out in jobs
// (finish) gives the sums of the old end (each worker flushing into its
// accumulator, a barrier, fixed shares of the sum) bit for bit, whichever
// worker flushes first, with one flush a worker at the end of the step or
// several during it, for two and three workers, with and without a
// clipper, and with GOMAXPROCS 1 (the workers' goroutines interleaved);
// also with a dense head read in place (the worker's chunks in groups),
// and with the flushes into the workers' per-example gradient buffers
// (flushWarm).
func TestFinish(t *testing.T) {
	nets := testNets()
	nets["head"] = headNet() // a dense head read in place: chunks in groups
	nets["warm"] = warmNet() // flushes into w.ex (flushWarm)
	for name, b := range nets {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(61, uint64(len(name))))
			params := randParams(rng, b.n)
			shapes, err := b.net.Shapes()
			if err != nil {
				t.Fatal(err)
			}
			const maxN = 2*denseGroup + 22
			x, y := b.batch(rng, maxN, shapes[len(shapes)-1].C)
			in := len(x) / maxN
			sum := func(opt Options, n int, clip Clipper, first int) []float32 {
				t.Helper()
				opt.MaxBatch, opt.deferMin = n, 1
				var p *Plan
				if first >= 0 {
					// Worker 1-first waits until the other has flushed.
					opt.finishHook = func(wi int) {
						if wi == 1-first && p.direct() {
							for p.end.flushed.Load() == 0 {
								runtime.Gosched()
							}
						}
					}
				}
				s, _ := planStep(t, b, params, opt, x[:n*in], y[:n], clip, func(q *Plan) { p = q })
				if first >= 0 && p.finishes() && p.direct() && p.end.second.Load() != int32(1-first) {
					t.Fatalf("worker %d flushed second, want %d", p.end.second.Load(), 1-first)
				}
				return s
			}
			for _, n := range []int{13, maxN} { // one flush a worker; several
				for _, clip := range []Clipper{nil, normClipper{0.5}} {
					for _, opt := range []Options{{Workers: 2, Chunk: 2}, {Workers: 2, Chunk: 4}, {Workers: 3, Chunk: 2}} {
						what := fmt.Sprintf("n %d clipped %v workers %d chunk %d", n, clip != nil, opt.Workers, opt.Chunk)
						ref := opt
						ref.noFinish = true
						want := sum(ref, n, clip, -1)
						for first := range 2 {
							sameBits(t, fmt.Sprintf("%s, worker %d flushing first", what, first), sum(opt, n, clip, first), want)
						}
						prev := runtime.GOMAXPROCS(1)
						got := sum(opt, n, clip, -1)
						runtime.GOMAXPROCS(prev)
						sameBits(t, what+", GOMAXPROCS 1", got, want)
					}
				}
			}
		})
	}
}

// TestFinishSteps: consecutive steps of one plan that end with finish
// give the old end's sums bit for bit when a worker leaves its step
// slowly: worker 0 returns only once the others are out of the step, so
// a late worker's signal cannot count for the next step (which then
// returned while that worker still added its jobs into the sum).
func TestFinishSteps(t *testing.T) {
	b := headNet()
	rng := rand.New(rand.NewPCG(62, 1))
	params := randParams(rng, b.n)
	shapes, err := b.net.Shapes()
	if err != nil {
		t.Fatal(err)
	}
	const n, steps = 64, 20
	opt := Options{Workers: 2, Chunk: 2, MaxBatch: n, deferMin: 1}
	ref := opt
	ref.noFinish = true
	opt.leaveHook = func(int) { time.Sleep(200 * time.Microsecond) } // past worker 0's spin, within the next step
	p, err := NewPlan(b.net, params, opt)
	if err != nil {
		t.Fatal(err)
	}
	q, err := NewPlan(b.net, params, ref)
	if err != nil {
		t.Fatal(err)
	}
	// The reference sums first, then the plan's steps back to back.
	xs, ys, want := make([][]float32, steps), make([][]int, steps), make([][]float32, steps)
	for step := range steps {
		xs[step], ys[step] = b.batch(rng, n, shapes[len(shapes)-1].C)
		want[step] = make([]float32, b.n)
		if _, err := q.Step(xs[step], ys[step], want[step], normClipper{0.5}); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]float32, steps)
	for step := range steps {
		got[step] = make([]float32, b.n)
		for k := range got[step] {
			got[step][k] = float32(math.NaN())
		}
		if _, err := p.Step(xs[step], ys[step], got[step], normClipper{0.5}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond) // (a late worker's writes land before the comparison)
	if !p.finishes() {
		t.Fatal("the plan does not end its steps with finish")
	}
	for step := range steps {
		sameBits(t, fmt.Sprintf("step %d", step), got[step], want[step])
	}
}

// planStep makes a plan of b's network with params and opt and runs one
// step of it on x, y with clip into a sum filled with NaN (which the step
// overwrites), returning the sum and the plan; made, if set, receives the
// plan before the step (for hooks in opt to reach it).
func planStep(t *testing.T, b *builder, params []float32, opt Options, x []float32, y []int, clip Clipper, made func(*Plan)) ([]float32, *Plan) {
	t.Helper()
	p, err := NewPlan(b.net, params, opt)
	if err != nil {
		t.Fatal(err)
	}
	if made != nil {
		made(p)
	}
	s := make([]float32, b.n)
	for k := range s {
		s[k] = float32(math.NaN()) // a step writes every entry
	}
	if _, err := p.Step(x, y, s, clip); err != nil {
		t.Fatal(err)
	}
	return s, p
}
