package clip

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/dpmf-go/dpmf/models"
)

// BenchmarkCIFARCNN measures one batched step (forward, backward, norms and
// clipped sum) of the Kairouz et al. CIFAR-10 CNN on 32x32x3 inputs,
// private (flat clipping) and non-private through the same code.
func BenchmarkCIFARCNN(b *testing.B) {
	for _, batch := range []int{64, 256, 500} {
		for _, private := range []bool{false, true} {
			name := fmt.Sprintf("batch=%d/private=%v", batch, private)
			b.Run(name, func(b *testing.B) {
				if testing.Short() && batch > 64 {
					b.Skip("large batch in -short mode")
				}
				m, err := models.NewCIFARCNN([3]int{3, 32, 32}, 10, 1)
				if err != nil {
					b.Fatal(err)
				}
				e, err := New(m, Options{Norm: 1, NonPrivate: !private, MaxBatch: batch})
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				x, y := randBatch(rng, batch, e.chw, 10)
				dst := make([]float32, m.NumParams())
				if _, err := e.ClippedSum(x, y, dst); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				var ms runtime.MemStats
				b.ResetTimer()
				for b.Loop() {
					if _, err := e.ClippedSum(x, y, dst); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(batch)*float64(b.N)/b.Elapsed().Seconds(), "examples/s")
				b.ReportMetric(float64(ms.HeapSys)/(1<<20), "heapMiB")
			})
		}
	}
}
