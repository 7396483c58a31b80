package nn

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// normClipper clips to zeta with a factor that depends on the example's
// norms alone (not on its index in a call), so pieces and one call see
// the same factors.
type normClipper struct{ zeta float64 }

func (c normClipper) Scale(_ int, sq []float64, _ float64, f []float64) {
	t := 0.0
	for _, v := range sq {
		t += v
	}
	s := min(1, c.zeta/math.Sqrt(t)*(1-1.0/(1<<20)))
	if math.IsNaN(s) {
		s = 0
	}
	for l := range f {
		f[l] = s
	}
}

// A batch run as physical pieces (StepAdd, SumInto) gives the sum
// StepContext gives on the whole batch, bit for bit, and the same losses,
// for every test network (dropout included), clipped or not, whatever
// the split into pieces of multiples of Granule; a piece that breaks the
// rule is refused.
func TestStepAddPiecesEqualOneStep(t *testing.T) {
	nets := testNets()
	drop := &builder{net: Network{Input: Shape{2, 4, 4}}}
	drop.conv(2, 3, 3, 1, 1, Tanh)
	drop.net.Layers = append(drop.net.Layers, Flatten{}, Dropout{Rate: 0.3, Seed: 11})
	drop.dense(48, 6, Tanh)
	nets["dropout"] = drop
	for name, b := range nets {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(name))))
			params := randParams(rng, b.n)
			shapes, err := b.net.Shapes()
			if err != nil {
				t.Fatal(err)
			}
			classes := shapes[len(shapes)-1].C
			const n = 41
			// Three workers, chunks of 4: Granule 12.
			p, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 3, Chunk: 4})
			if err != nil {
				t.Fatal(err)
			}
			if p.Granule() != 12 {
				t.Fatalf("Granule %d, want 12", p.Granule())
			}
			x, y := b.batch(rng, n, classes)
			in := b.net.Input.Size()
			for _, clip := range []Clipper{nil, normClipper{0.5}} {
				p.SetStepCount(4)
				want := make([]float32, b.n)
				l, err := p.StepContext(context.Background(), x, y, want, clip)
				if err != nil {
					t.Fatal(err)
				}
				wantLoss := slices.Clone(l)
				for _, pieces := range [][]int{{12, 29}, {24, 17}, {12, 12, 12, 5}, {36, 5}, {12, 24, 5}} {
					p.SetStepCount(4)
					p.BeginAdd()
					var loss []float64
					lo := 0
					for _, k := range pieces {
						l, err := p.StepAdd(context.Background(), x[lo*in:(lo+k)*in], y[lo:lo+k], clip)
						if err != nil {
							t.Fatal(err)
						}
						loss = append(loss, l...)
						lo += k
					}
					got := make([]float32, b.n)
					if err := p.SumInto(got); err != nil {
						t.Fatal(err)
					}
					for j := range got {
						if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
							t.Fatalf("clip %v, pieces %v: coordinate %d is %v, one step gives %v", clip != nil, pieces, j, got[j], want[j])
						}
					}
					for i := range loss {
						if math.Float64bits(loss[i]) != math.Float64bits(wantLoss[i]) {
							t.Fatalf("pieces %v: loss %d is %v, one step gives %v", pieces, i, loss[i], wantLoss[i])
						}
					}
					if p.StepCount() != 5 {
						t.Fatalf("step count %d after the pieces, want 5 (one step)", p.StepCount())
					}
				}
			}
			// A first piece of 5 (not a multiple of 12) is refused at the
			// second piece; the batch is abandoned. No batch, no piece.
			if _, err := p.StepAdd(context.Background(), x[:5*in], y[:5], nil); err == nil {
				t.Fatal("a piece without BeginAdd was accepted")
			}
			p.BeginAdd()
			if _, err := p.StepAdd(context.Background(), x[:5*in], y[:5], nil); err != nil {
				t.Fatal(err)
			}
			if _, err := p.StepAdd(context.Background(), x[5*in:10*in], y[5:10], nil); err == nil {
				t.Fatal("a piece after one of 5 examples (Granule 12) was accepted")
			}
			if err := p.SumInto(make([]float32, b.n)); err == nil {
				t.Fatal("SumInto after an abandoned batch was accepted")
			}
		})
	}
}
