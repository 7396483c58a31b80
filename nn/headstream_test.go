package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// pooledHeadNet is headNet with the convolutions the CIFAR CNN has
// before its head: two implicit convolutions of 32 channels (whose
// products prefetch, 32 columns a tile) and a pool before a 512 x hidden
// dense layer and a hidden x 10 one.
func pooledHeadNet(hidden int) *builder {
	b := &builder{net: Network{Input: Shape{3, 8, 8}}}
	b.conv(3, 32, 3, 1, 1, Tanh)
	b.conv(32, 32, 3, 1, 1, Tanh)
	b.net.Layers = append(b.net.Layers, MaxPool{Size: 2}, Flatten{})
	b.dense(512, hidden, Tanh)
	b.dense(hidden, 10, Identity)
	return b
}

// streamNet is pooledHeadNet with a 512x128 dense layer read in place.
func streamNet() *builder { return pooledHeadNet(128) }

// TestHeadStream: a group's last forward pass streaming the head's
// weight into the caches during its last convolution (Plan.streamAt)
// gives the per-example gradients, losses, norms, sums (clipped and
// not) and StepAdd sums of the plan without it, bit for bit: batches 1,
// 3, 64 and 65, one and two workers, examples whose input is not finite
// (dropped) or saturates every tanh; the CIFAR CNN at 64 and 65 (not
// with -short).
// The stream starts at the last implicit convolution before the head,
// and only in plans with a head run for groups of chunks.
func TestHeadStream(t *testing.T) {
	if !hasDenseKernels() {
		t.Skip("no dense kernels on this CPU")
	}
	nets := map[string]*builder{"stream": streamNet()}
	if !testing.Short() {
		nets["cifar"] = cifarCNN()
	}
	for name, b := range nets {
		for _, n := range []int{1, 3, 64, 65} {
			for _, workers := range []int{1, 2} {
				if name == "cifar" && (n < 64 || workers == 1) {
					continue
				}
				t.Run(fmt.Sprintf("%s/n%d/w%d", name, n, workers), func(t *testing.T) {
					testHeadStream(t, b, n, workers)
				})
			}
		}
	}
}

func testHeadStream(t *testing.T, b *builder, n, workers int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(workers)))
	params := randParams(rng, b.n)
	for k := range params {
		params[k] *= 0.3
	}
	opt := Options{MaxBatch: n, Workers: workers, Chunk: 2}
	p, err := NewPlan(b.net, params, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.noHeadStream = true
	ref, err := NewPlan(b.net, params, opt)
	if err != nil {
		t.Fatal(err)
	}
	last := 0
	for i := range p.head {
		if s := &p.stages[i]; s.kind == kConv && s.implicit {
			last = i
		}
	}
	if p.head == 0 || last == 0 || p.streamAt != last || ref.streamAt != 0 {
		t.Fatalf("head at %d, last implicit convolution %d, stream from %d (reference %d)", p.head, last, p.streamAt, ref.streamAt)
	}
	x, y := b.batch(rng, n, 10)
	oddInputs(x, n)
	sameSteps(t, b, p, ref, x, y)
	for _, w := range p.workers {
		if w.gemm.Streaming() != 0 {
			t.Fatalf("a worker's stream left on after the step (%d)", w.gemm.Streaming())
		}
	}
}
