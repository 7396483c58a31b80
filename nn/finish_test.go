package nn

import (
	"fmt"
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
// clipper, and with GOMAXPROCS 1 (the workers' goroutines interleaved).
func TestFinish(t *testing.T) {
	for name, b := range testNets() {
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

// TestHelp: the worker through its chunks first computing the lower
// rows of the other's large products (help.go) gives the sums of the
// plan without help bit for bit: with every product of at least 4096
// multiply-adds split (no helper), with every half handed to a helper
// that takes none (the worker computes it after its own), and with
// worker 1 holding back its
// chunks until worker 0 is waiting to help and handing it each half
// (waiting until it takes it), so that worker 0 computes part of all of
// worker 1's large products, also with GOMAXPROCS 1. (Each
// half keeps a third of the product at least, so both stay above the
// size below which blas computes a product in another order.)
func TestHelp(t *testing.T) {
	helped := 0
	defer func() {
		if helped == 0 {
			t.Error("no test network had worker 0 compute rows of worker 1's products")
		}
	}()
	// The CIFAR CNN's pattern on 12x12 maps: products of up to about
	// 250k multiply-adds.
	big := &builder{net: Network{Input: Shape{3, 12, 12}}}
	big.conv(3, 16, 3, 1, 1, Tanh)
	big.conv(16, 16, 3, 1, 1, Tanh)
	big.net.Layers = append(big.net.Layers, MaxPool{Size: 2})
	big.conv(16, 32, 3, 1, 1, Tanh)
	big.net.Layers = append(big.net.Layers, MaxPool{Size: 2})
	big.net.Layers = append(big.net.Layers, Flatten{})
	big.dense(32*3*3, 64, Tanh)
	big.dense(64, 10, Identity)
	nets := testNets()
	nets["cifar-pattern"] = big
	for name, b := range nets {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(67, uint64(len(name))))
			params := randParams(rng, b.n)
			shapes, err := b.net.Shapes()
			if err != nil {
				t.Fatal(err)
			}
			const n = 13
			x, y := b.batch(rng, n, shapes[len(shapes)-1].C)
			sum := func(opt Options, clip Clipper, late bool) ([]float32, *Plan) {
				t.Helper()
				opt.MaxBatch, opt.Workers, opt.Chunk = n, 2, 2
				opt.helpTest.min, opt.helpTest.idle = 4096, time.Minute
				var p *Plan
				if late {
					opt.chunkHook = func(wi, c int) {
						if wi == 1 && c == 1 {
							for p.help.on.Load() == 0 {
								runtime.Gosched()
							}
						}
					}
				}
				return planStep(t, b, params, opt, x, y, clip, func(q *Plan) { p = q })
			}
			for _, clip := range []Clipper{nil, normClipper{0.5}} {
				what := fmt.Sprintf("clipped %v", clip != nil)
				want, _ := sum(Options{noHelp: true}, clip, false)
				got, _ := sum(Options{noHelp: true, helpTest: helpTest{always: true}}, clip, false)
				sameBits(t, what+", every product split", got, want)
				got, p := sum(Options{helpTest: helpTest{refuse: true}}, clip, true)
				sameBits(t, what+", every half handed over taken back", got, want)
				if p.help.helped.Load() != 0 {
					t.Fatalf("%s: a helper refusing every half computed %d", what, p.help.helped.Load())
				}
				for _, procs := range []int{2, 1} {
					prev := runtime.GOMAXPROCS(procs)
					got, p := sum(Options{helpTest: helpTest{wait: true}}, clip, true)
					runtime.GOMAXPROCS(prev)
					sameBits(t, fmt.Sprintf("%s, worker 0 helping, GOMAXPROCS %d", what, procs), got, want)
					if p.help.helped.Load() > 0 {
						helped++
					}
				}
			}
		})
	}
}

// planStep makes a plan of b's network with params and opt and runs one
// step of it on x, y with clip, returning the sum and the plan; made, if
// set, receives the plan before the step (for hooks in opt to reach it).
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
	if _, err := p.Step(x, y, s, clip); err != nil {
		t.Fatal(err)
	}
	return s, p
}
