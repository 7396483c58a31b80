package toeplitz_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// Benchmarks for BENCHMARKS.md (issue 18). Run with
//	go test -run XXX -bench 'OptimizeBLT|OptimizeToeplitz' -benchtime 20x ./mfnoise/toeplitz
// (the BLT noise benchmarks are in package noise)

// BenchmarkOptimizeBLT is blt:4 optimized for n = 1e5 and 1e6 steps under
// single and min-sep (k = n/1000 participations, b = 1000 apart).
func BenchmarkOptimizeBLT(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		w, _ := dpcore.PrefixSum(n)
		ms, _ := dpcore.MinSepParticipation(n/1000, 1000)
		for _, schema := range []dpcore.Schema{dpcore.SingleParticipation(), ms} {
			b.Run(fmt.Sprintf("n=%d/%s", n, schema.Kind), func(b *testing.B) {
				var r *optimize.Result
				for b.Loop() {
					var err error
					_, r, err = toeplitz.Optimize(context.Background(), toeplitz.Problem{Workload: w, Schema: schema, Buffers: 4}, nil)
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(r.Iterations), "iters")
				b.ReportMetric(r.Loss, "loss")
			})
		}
	}
}

// BenchmarkOptimizeToeplitz is toeplitz:64 at n = 1e5 under min-sep.
func BenchmarkOptimizeToeplitz(b *testing.B) {
	n := 100_000
	w, _ := dpcore.PrefixSum(n)
	ms, _ := dpcore.MinSepParticipation(1000, 100)
	var r *optimize.Result
	for b.Loop() {
		var err error
		_, r, err = toeplitz.Optimize(context.Background(), toeplitz.Problem{Workload: w, Schema: ms, Bands: 64}, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(r.Iterations), "iters")
	b.ReportMetric(r.Loss, "loss")
}
