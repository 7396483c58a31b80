package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// workingSetSwitches are the Options switches that turn off this file's
// changes to what a training step keeps and where it writes (each the
// same values), with the stages whose plans they change.
var workingSetSwitches = map[string]struct {
	off  func(*Options)
	uses func(*Plan) bool
}{
	// Each example's bordered output gradients in the first example's
	// part of gp (worker.gpOne): plans with an example-major section.
	"gpone": {func(o *Options) { o.noGpOne = true }, func(p *Plan) bool { return p.major > 0 }},
	// Max pools' derivatives at their output, their input shared by a
	// group's slots (poolOut, sharedAct): plans with such a pool.
	"poolout": {func(o *Options) { o.noPoolOut = true }, func(p *Plan) bool {
		for i := range p.stages {
			if p.poolOut(&p.stages[i]) {
				return true
			}
		}
		return false
	}},
	// The deferred dense layers' flushes into w.ex (flushWarm), the
	// first into dst as before, and both: plans that end with finish.
	"warmflush":   {func(o *Options) { o.noWarmFlush = true }, finishing},
	"directfirst": {func(o *Options) { o.directFirst = true }, finishing},
	// The buffers no training step touches in a plain arena, off the
	// huge pages (buildWorker; arena_test.go checks that a private step
	// leaves them alone): plans with such buffers. The non-private
	// steps here write some (zeroExample) and read gp's.
	"coldsplit": {func(o *Options) { o.noColdSplit = true }, func(p *Plan) bool { return p.workers[0].cold != nil }},
}

// warmNet is a network whose dense layers' weights, all deferred with
// Options.deferMin 1, fit in its per-example gradient buffer (w.ex),
// where the warm flushes write them (flushWarm).
func warmNet() *builder { return pooledHeadNet(16) }

// finishing reports whether p's two-worker training steps end with
// finish and so flush the deferred dense rows (warm flushes).
func finishing(p *Plan) bool { return p.end.on && len(p.workers) == 2 }

// TestWorkingSet: each change of workingSetSwitches gives the per-example
// gradients, losses, norms and sums (clipped and not, whole steps and
// StepAdd pieces) of the path it replaces, bit for bit, on every test
// network whose plan it changes and on the network of the dense head
// read in place (the CIFAR CNN too without -short) and warmNet: batches 1, 3, 64 and
// 65 (and 150 with every dense layer deferred, flushed during the step
// too), one and two workers, chunks of 2 and 4, with examples whose
// input is not finite or saturates every tanh.
func TestWorkingSet(t *testing.T) {
	nets := testNets()
	nets["head"] = headNet()
	nets["warm"] = warmNet()
	if !testing.Short() {
		nets["cifar"] = cifarCNN()
	}
	for sw, c := range workingSetSwitches {
		some := 0
		for name, b := range nets {
			for _, n := range []int{1, 3, 64, 65, 150} {
				for _, workers := range []int{1, 2} {
					for _, chunk := range []int{2, 4} {
						if name == "cifar" && (n < 64 || chunk == 4) || n == 150 && workers == 1 {
							continue
						}
						rng := rand.New(rand.NewPCG(uint64(n), uint64(10*workers+chunk)))
						params := randParams(rng, b.n)
						for k := range params {
							params[k] *= 0.3
						}
						opt := Options{MaxBatch: n, Workers: workers, Chunk: chunk}
						if n == 150 || name == "warm" {
							// Every dense layer deferred, and flushed
							// during the step too.
							opt.deferMin = 1
						}
						p, err := NewPlan(b.net, params, opt)
						if err != nil {
							t.Fatal(err)
						}
						if !c.uses(p) {
							continue
						}
						some++
						c.off(&opt)
						ref, err := NewPlan(b.net, params, opt)
						if err != nil {
							t.Fatal(err)
						}
						t.Run(fmt.Sprintf("%s/%s/n%d/w%d/c%d", sw, name, n, workers, chunk), func(t *testing.T) {
							shapes, err := b.net.Shapes()
							if err != nil {
								t.Fatal(err)
							}
							x, y := b.batch(rng, n, shapes[len(shapes)-1].C)
							if p.stages[0].kind != kEmbed { // (ids must be valid)
								oddInputs(x, n)
							}
							sameSteps(t, b, p, ref, x, y)
						})
					}
				}
			}
		}
		if some == 0 {
			t.Errorf("%s: no plan changed", sw)
		}
	}
}
