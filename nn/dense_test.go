package nn

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDeferDense: gathering the dense layers' rows over groups of
// denseGroup examples (every dense layer here: deferMin 1) before adding U^T G into the accumulator
// (deferDense) changes only the rounding of the dense weights' sums:
// every other coordinate is the same bit for bit as adding after each
// chunk, and the dense weights agree to float32 summation error. The
// batch is more than one group per worker, so flushes happen inside the
// step and at its end (StepAdd's pieces, flushed by SumInto, are
// TestStepAddPiecesEqualOneStep's).
func TestDeferDense(t *testing.T) {
	const n = 2*denseGroup + 22
	for name, b := range testNets() {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(9, uint64(len(name))))
			params := randParams(rng, b.n)
			shapes, err := b.net.Shapes()
			if err != nil {
				t.Fatal(err)
			}
			x, y := b.batch(rng, n, shapes[len(shapes)-1].C)
			sum := func(opt Options, clip Clipper) ([]float32, *Plan) {
				t.Helper()
				opt.MaxBatch = n
				return planStep(t, b, params, opt, x, y, clip, nil)
			}
			for _, clip := range []Clipper{nil, normClipper{0.5}} {
				what := fmt.Sprintf("clipped %v", clip != nil)
				got, p := sum(Options{Workers: 2, Chunk: 4, deferMin: 1}, clip)
				want, _ := sum(Options{Workers: 2, Chunk: 4, noDeferDense: true}, clip)
				dense := make([]bool, b.n)
				for _, s := range p.stages {
					if s.kind != kDense {
						continue
					}
					w := s.w.Offset
					big := 0.0
					for k := w; k < w+s.w.Len; k++ {
						dense[k] = true
						big = max(big, math.Abs(float64(want[k])))
					}
					for k := w; k < w+s.w.Len; k++ {
						if d := math.Abs(float64(got[k] - want[k])); !(d <= 1e-5*big) {
							t.Fatalf("%s: dense weight %d is %v, added by chunk %v", what, k, got[k], want[k])
						}
					}
				}
				for k := range got {
					if !dense[k] && math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("%s: coordinate %d is %v, added by chunk %v", what, k, got[k], want[k])
					}
				}
			}
			// As pieces (StepAdd), the groups cross the pieces
			// and SumInto adds the last: the same sum bit for bit.
			clip := normClipper{0.5}
			want, _ := sum(Options{Workers: 2, Chunk: 4, deferMin: 1}, clip)
			p, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 2, Chunk: 4, deferMin: 1})
			if err != nil {
				t.Fatal(err)
			}
			p.BeginAdd()
			in := len(x) / n
			for _, r := range [][2]int{{0, 80}, {80, n}} {
				if _, err := p.StepAdd(context.Background(), x[r[0]*in:r[1]*in], y[r[0]:r[1]], clip); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]float32, b.n)
			if err := p.SumInto(got); err != nil {
				t.Fatal(err)
			}
			sameBits(t, "pieces", got, want)
		})
	}
}
