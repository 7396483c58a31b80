package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/internal/rusage"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// normClipper scales each example's gradient to L2 norm at most 1.
type normClipper struct{}

func (normClipper) Scale(_ int, sq []float64, _ float64, f []float64) {
	s := 0.0
	for _, v := range sq {
		s += v
	}
	g := min(1, 1/math.Sqrt(s))
	for l := range f {
		f[l] = g
	}
}

// BenchmarkSkipGarbage is the private step of the CIFAR CNN and of
// WRN-16-4 with the implicit convolutions' weight gradients skipping
// their garbage columns and summing over them (nn.WithGarbage), the two
// plans alternated step by step in one process, so that the load of a
// shared machine falls on both alike: examples per CPU second of each
// (the CPU of both workers), and their ratio.
func BenchmarkSkipGarbage(b *testing.B) {
	for _, c := range []struct {
		name    string
		model   func() (models.Model, error)
		batches []int
	}{
		{"cnn", func() (models.Model, error) { return models.NewCIFARCNN([3]int{3, 32, 32}, 10, 1) }, []int{64, 500}},
		{"wrn", func() (models.Model, error) { return models.NewWRN16x4([3]int{3, 32, 32}, 10, 16, 1) }, []int{16, 64}},
	} {
		for _, batch := range c.batches {
			b.Run(fmt.Sprintf("%s/b%d", c.name, batch), func(b *testing.B) {
				m, err := c.model()
				if err != nil {
					b.Fatal(err)
				}
				var plans [2]*nn.Plan
				for v := range plans {
					opt := nn.Options{MaxBatch: batch}
					if v == 1 {
						nn.WithGarbage(&opt)
					}
					if plans[v], err = nn.NewPlan(m.Network(), m.Params(), opt); err != nil {
						b.Fatal(err)
					}
				}
				rng := rand.New(rand.NewPCG(1, 2))
				x := make([]float32, batch*plans[0].InputSize())
				for k := range x {
					x[k] = float32(rng.NormFloat64())
				}
				y := make([]int, batch)
				for k := range y {
					y[k] = rng.IntN(10)
				}
				dst := make([]float32, m.NumParams())
				var per [2][]float64
				for b.Loop() {
					for v, p := range plans {
						c0 := rusage.CPUSeconds()
						if _, err := p.Step(x, y, dst, normClipper{}); err != nil {
							b.Fatal(err)
						}
						per[v] = append(per[v], rusage.CPUSeconds()-c0)
					}
				}
				// Medians: a step now and then shares its core with
				// another job's cache traffic.
				med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
				skip, all := float64(batch)/med(per[0]), float64(batch)/med(per[1])
				b.ReportMetric(skip, "skip-ex/cpu-s")
				b.ReportMetric(all, "all-ex/cpu-s")
				b.ReportMetric(skip/all, "skip/all")
			})
		}
	}
}
