package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSumsq64 times sumsq64 in nanoseconds per float on vectors in
// L1 (4096 floats), of the CIFAR CNN's largest weight gradient (1152 x
// 128 + 128, in L2) and of all its convolutions' gradients together
// (286,848 floats, an example's norm).
func BenchmarkSumsq64(b *testing.B) {
	rng := rand.New(rand.NewPCG(37, 38))
	for _, n := range []int{4096, 1152*128 + 128, 286848} {
		v := randVec(rng, n, 1)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			s := 0.0
			for b.Loop() {
				s += sumsq64(v)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/float")
			if s < 0 {
				b.Fatal(s)
			}
		})
	}
}
