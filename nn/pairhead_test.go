package nn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPairHead: workers running the dense head of several of their
// chunks at once (Plan.head, trainGroup: two of two examples, four of
// one, or three of two as an override) give the per-example gradients, losses,
// norms and sums (clipped and not, whole steps and StepAdd pieces) of
// running it chunk by chunk, bit for bit: batches that are not a
// multiple of four and workers with an odd number of chunks (a chunk
// left unpaired, a pair's second chunk short), chunks of one and two,
// one and two workers, with examples whose input is not finite (dropped)
// or large enough to saturate every tanh, in the first and the second
// chunk of pairs.
func TestPairHead(t *testing.T) {
	if !hasDenseKernels() {
		t.Skip("no dense kernels on this CPU")
	}
	nets := map[string]*builder{"head": headNet()}
	batches := []int{1, 3, 5, 64, 65}
	if !testing.Short() {
		nets["cifar"] = cifarCNN()
	}
	for name, b := range nets {
		for _, n := range batches {
			for _, workers := range []int{1, 2} {
				for _, cg := range [][2]int{{1, 0}, {2, 0}, {2, 3}} {
					chunk, group := cg[0], cg[1]
					if name == "cifar" && (n < 64 || chunk == 1 || workers == 1 || group > 0) {
						continue
					}
					t.Run(fmt.Sprintf("%s/n%d/w%d/c%d/g%d", name, n, workers, chunk, group), func(t *testing.T) {
						testPairHead(t, b, n, workers, chunk, group)
					})
				}
			}
		}
	}
}

func testPairHead(t *testing.T, b *builder, n, workers, chunk, group int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(10*workers+chunk)))
	params := randParams(rng, b.n)
	for k := range params {
		params[k] *= 0.3
	}
	opt := Options{MaxBatch: n, Workers: workers, Chunk: chunk, headGroup: group}
	p, err := NewPlan(b.net, params, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.noPairHead = true
	ref, err := NewPlan(b.net, params, opt)
	if err != nil {
		t.Fatal(err)
	}
	want := 4 / p.opt.Chunk // (at most MaxBatch)
	if group > 0 {
		want = group
	}
	if p.head != len(p.stages)-2 || p.group != want || ref.head != 0 {
		t.Fatalf("head at stage %d in groups of %d (reference %d), want %d in %d (0)", p.head, p.group, ref.head, len(p.stages)-2, want)
	}
	x, y := b.batch(rng, n, 10)
	oddInputs(x, n)
	sameSteps(t, b, p, ref, x, y)
}

// oddInputs makes examples 0, 3 and 62 of the batch x of n examples not
// finite and multiplies 4 and 63 by 10^4 (saturating every tanh).
func oddInputs(x []float32, n int) {
	sz := len(x) / n
	// Not finite: examples 0 (the first chunk of the first pair with
	// chunks of one or one worker), 3 and 62; saturating: 4 and 63.
	for _, i := range []int{0, 3, 62} {
		if i < n {
			x[i*sz+1+i%5] = float32([]float64{math.Inf(1), math.NaN()}[i%2])
		}
	}
	for _, i := range []int{4, 63} {
		if i < n {
			for k := i * sz; k < (i+1)*sz; k++ {
				x[k] *= 1e4
			}
		}
	}
}

// sameSteps checks that plans p and ref of network b give the same
// per-example gradients, losses, sums (with and without a clipper), the
// norms the clipper sees and StepAdd sums on the batch x, y, bit for bit.
func sameSteps(t *testing.T, b *builder, p, ref *Plan, x []float32, y []int) {
	t.Helper()
	n := len(y)
	sz := len(x) / n
	gp, lp := gradientsOf(t, p, x, y, b.n)
	gr, lr := gradientsOf(t, ref, x, y, b.n)
	for i := range n {
		sameBits(t, fmt.Sprintf("example %d gradient", i), gp[i], gr[i])
		sameLoss(t, i, lp[i], lr[i])
	}
	for c := range 2 {
		var clp, clr Clipper
		var np, nr *testClipper
		if c == 1 {
			np, nr = &testClipper{sq: make([][]float64, n)}, &testClipper{sq: make([][]float64, n)}
			clp, clr = np, nr
		}
		sp, sr := make([]float32, b.n), make([]float32, b.n)
		lp, err := p.Step(x, y, sp, clp)
		if err != nil {
			t.Fatal(err)
		}
		lp = append([]float64(nil), lp...)
		lr, err := ref.Step(x, y, sr, clr)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			sameLoss(t, i, lp[i], lr[i])
		}
		sameBits(t, fmt.Sprintf("clipper %v: sum", c == 1), sp, sr)
		if c == 1 {
			for i := range n {
				sameBits64(t, fmt.Sprintf("example %d norms", i), np.sq[i], nr.sq[i])
			}
		}
	}
	// StepAdd in pieces of two rounds of chunks (the last shorter; for
	// batches larger than a round, StepAdd's condition).
	if n <= p.Granule() {
		return
	}
	var sums [2][]float32
	for k, q := range []*Plan{p, ref} {
		q.BeginAdd()
		for i0 := 0; i0 < n; i0 += 2 * q.Granule() {
			i1 := min(n, i0+2*q.Granule())
			if _, err := q.StepAdd(context.Background(), x[i0*sz:i1*sz], y[i0:i1], &testClipper{}); err != nil {
				t.Fatal(err)
			}
		}
		sums[k] = make([]float32, b.n)
		if err := q.SumInto(sums[k]); err != nil {
			t.Fatal(err)
		}
	}
	sameBits(t, "StepAdd sum", sums[0], sums[1])
}

func sameLoss(t *testing.T, i int, a, b float64) {
	t.Helper()
	if math.Float64bits(a) != math.Float64bits(b) && !(math.IsNaN(a) && math.IsNaN(b)) {
		t.Fatalf("example %d: loss %v, reference %v", i, a, b)
	}
}

// TestPairHeadOnly: only plans with a dense head read in place run it for
// groups of chunks: none of the test networks, nor WideResNet-16-4, nor
// the CIFAR CNN at chunks of four or with the head packed.
func TestPairHeadOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(48, 49))
	for name, b := range testNets() {
		p, err := NewPlan(b.net, make([]float32, b.n), Options{MaxBatch: 8, Workers: 2, Chunk: 2})
		if err != nil {
			t.Fatal(err)
		}
		if p.head != 0 || len(p.workers[0].slots) != 0 {
			t.Errorf("%s: head at stage %d, %d slots", name, p.head, len(p.workers[0].slots))
		}
	}
	wrn, params := wrnNet(1, rng)
	cnn := cifarCNN()
	for name, c := range map[string]struct {
		net    Network
		params []float32
		opt    Options
		head   bool
	}{
		"wrn":               {wrn, params, Options{MaxBatch: 64}, false},
		"cifar":             {cnn.net, make([]float32, cnn.n), Options{MaxBatch: 64}, hasDenseKernels()},
		"cifar chunk 4":     {cnn.net, make([]float32, cnn.n), Options{MaxBatch: 64, Chunk: 4}, false},
		"cifar head packed": {cnn.net, make([]float32, cnn.n), Options{MaxBatch: 64, noDenseInPlace: true}, false},
	} {
		p, err := NewPlan(c.net, c.params, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		if (p.head > 0) != c.head {
			t.Errorf("%s: head at stage %d, want one: %v", name, p.head, c.head)
		}
	}
}
