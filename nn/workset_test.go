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
}

// TestWorkingSet: each change of workingSetSwitches gives the per-example
// gradients, losses, norms and sums (clipped and not, whole steps and
// StepAdd pieces) of the path it replaces, bit for bit, on every test
// network whose plan it changes and on the network of the dense head
// read in place (the CIFAR CNN too without -short): batches 1, 3, 64 and
// 65, one and two workers, chunks of 2 and 4, with examples whose input
// is not finite or saturates every tanh.
func TestWorkingSet(t *testing.T) {
	nets := testNets()
	nets["head"] = headNet()
	if !testing.Short() {
		nets["cifar"] = cifarCNN()
	}
	for sw, c := range workingSetSwitches {
		some := 0
		for name, b := range nets {
			for _, n := range []int{1, 3, 64, 65} {
				for _, workers := range []int{1, 2} {
					for _, chunk := range []int{2, 4} {
						if name == "cifar" && (n < 64 || chunk == 4) {
							continue
						}
						rng := rand.New(rand.NewPCG(uint64(n), uint64(10*workers+chunk)))
						params := randParams(rng, b.n)
						for k := range params {
							params[k] *= 0.3
						}
						opt := Options{MaxBatch: n, Workers: workers, Chunk: chunk}
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
							oddInputs(x, n)
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
