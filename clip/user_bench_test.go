package clip

import (
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// BenchmarkUserClippedSum is one step of the Fashion-MNIST MLP (784-128-10)
// on 1000 examples: per-example clipping (ClippedSum, k = 1) against
// per-user clipping of 250 users of 4 examples each (UserClippedSum), the
// cost of combining a user's per-example gradients exactly before
// clipping.
func BenchmarkUserClippedSum(b *testing.B) {
	installBLAS()
	m, err := models.NewMLP([3]int{1, 28, 28}, []int{128}, 10, nn.Tanh, 1)
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	e, err := New(m, Options{Norm: 1, MaxBatch: n})
	if err != nil {
		b.Fatal(err)
	}
	x, y := randBatch(rand.New(rand.NewPCG(1, 2)), n, 784, 10)
	dst := make([]float32, m.NumParams())
	groups := make([]int, n/4)
	for i := range groups {
		groups[i] = 4
	}
	b.Run("per-example", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.ClippedSum(x, y, dst); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "examples/s")
	})
	b.Run("per-user-k4", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.UserClippedSum(x, y, groups, UserOptions{}, dst); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "examples/s")
	})
}
