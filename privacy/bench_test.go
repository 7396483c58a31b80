package privacy

import (
	"context"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/mfnoise"
)

// BenchmarkEpsilonSpentRun is the accounting cost of reporting epsilon on
// every step of a 2000-step DP-SGD run (q = 0.01) with the PLD accountant,
// against computing it exactly at every step (-benchtime=1x; the exact
// variant costs minutes).
//
//	go test ./privacy -run '^$' -bench EpsilonSpentRun -benchtime 1x
func BenchmarkEpsilonSpentRun(b *testing.B) {
	const n = 2000
	for range b.N {
		p, _, err := NewPlan(context.Background(), Request{Mechanism: mfnoise.DPSGD{}, Examples: 50000, Batch: 500, Steps: n, ClipNorm: 1, NoiseMultiplier: 1})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		prev := 0.0
		for t := 1; t <= n; t++ {
			e, err := p.EpsilonSpent(t)
			if err != nil || e < prev {
				b.Fatal(err)
			}
			prev = e
		}
		b.ReportMetric(float64(len(p.spent)), "accountant-calls")
		b.ReportMetric(time.Since(start).Seconds(), "s/run")
		// Sample the exact value at a few steps to time one call.
		start = time.Now()
		for _, t := range []int{10, 100, 1000, 2000} {
			if _, err := p.EpsilonAfter(t); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(time.Since(start).Seconds()/4*n, "s/run-if-exact")
	}
}
