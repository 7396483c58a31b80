package mfnoise

import (
	"context"
	"fmt"
	"testing"
)

// Benchmarks for BENCHMARKS.md (issue 18). Run with
//	go test -run XXX -bench 'BLTNoise|Memcpy/d=1000000/|OptimizeBLT|OptimizeToeplitz' -benchtime 20x ./mfnoise

// BenchmarkBLTNoise is one step of BLT noise: d Gaussians drawn, Nbuf
// buffers read and written. Bytes: (2 Nbuf + 1) d float32 (buffers read and
// written, output written); the "gen" variant adds the time of drawing the
// Gaussians, the "buffers" variant times only the buffer pass, which is
// what the memory bandwidth bounds.
func BenchmarkBLTNoise(b *testing.B) {
	const d = 1_000_000
	for _, nb := range []int{1, 2, 3, 4, 8} {
		p := BLTParams{}
		for i := range nb {
			p.Theta = append(p.Theta, 0.5+0.4*float64(i)/float64(nb))
			p.Omega = append(p.Omega, 0.4/float64(nb))
		}
		m, err := NewBLT("blt", 1<<30, p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("gen/d=%d/nbuf=%d", d, nb), func(b *testing.B) {
			s, err := newToeplitzSource[float32](m, d, NoiseOptions{Seed: testSeed(1)})
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]float32, d)
			b.SetBytes(int64(4 * d * (2*nb + 1)))
			for b.Loop() {
				s.next(dst)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
		})
		b.Run(fmt.Sprintf("buffers/d=%d/nbuf=%d", d, nb), func(b *testing.B) {
			s, err := newToeplitzSource[float32](m, d, NoiseOptions{Seed: testSeed(1)})
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]float32, d)
			for k := range dst {
				dst[k] = 1
			}
			b.SetBytes(int64(4 * d * (2*nb + 1)))
			for b.Loop() {
				s.forShards(func(w, sh int) {
					lo, hi := shardRange(sh, d)
					s.bltShard(dst[lo:hi], lo)
				})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
		})
	}
}

// BenchmarkOptimizeBLT is blt:4 optimized for n = 1e5 and 1e6 steps under
// single and min-sep (k = n/1000 participations, b = 1000 apart).
func BenchmarkOptimizeBLT(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		w, _ := PrefixSum(n)
		ms, _ := MinSepParticipation(n/1000, 1000)
		for _, s := range []Schema{SingleParticipation(), ms} {
			b.Run(fmt.Sprintf("n=%d/%s", n, s.Kind), func(b *testing.B) {
				var r *ToeplitzResult
				for b.Loop() {
					var err error
					r, err = OptimizeBLT(context.Background(), w, s, 4, nil)
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(r.Iterations), "iters")
				b.ReportMetric(r.Objective, "loss")
			})
		}
	}
}

// BenchmarkOptimizeToeplitz is toeplitz:64 at n = 1e5 under min-sep.
func BenchmarkOptimizeToeplitz(b *testing.B) {
	n := 100_000
	w, _ := PrefixSum(n)
	ms, _ := MinSepParticipation(1000, 100)
	var r *ToeplitzResult
	for b.Loop() {
		var err error
		r, err = OptimizeToeplitz(context.Background(), w, ms, 64, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(r.Iterations), "iters")
	b.ReportMetric(r.Objective, "loss")
}
