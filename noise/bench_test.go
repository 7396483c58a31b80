package noise

import (
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"

	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// Benchmarks for BENCHMARKS.md. Run with
//	go test -run XXX -bench 'Memcpy|GaussianAll|Banded|Dense|TreeOnline|BLTNoise' -benchtime 20x ./noise

var benchDims = []int{1_000_000, 4_000_000}

// BenchmarkMemcpy measures a plain copy of d float32 (read d, write d), on
// one core and split over two.
//
// The 64e6 case (512 MB moved) is well beyond the 32 MB L3 and gives the
// DRAM copy bandwidth the other figures are compared with.
func BenchmarkMemcpy(b *testing.B) {
	for _, d := range append(benchDims, 64_000_000) {
		src, dst := make([]float32, d), make([]float32, d)
		// Touch both: untouched pages all map to the zero page.
		for k := range src {
			src[k], dst[k] = float32(k), 1
		}
		for _, par := range []int{1, 2} {
			b.Run(fmt.Sprintf("d=%d/cores=%d", d, par), func(b *testing.B) {
				b.SetBytes(int64(8 * d))
				for b.Loop() {
					var wg sync.WaitGroup
					for p := range par {
						lo, hi := p*d/par, (p+1)*d/par
						wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
					}
					wg.Wait()
				}
			})
		}
	}
}

// BenchmarkGaussianAll is independent noise (d Gaussians per step) on all
// cores.
func BenchmarkGaussianAll(b *testing.B) {
	for _, d := range benchDims {
		b.Run(fmt.Sprintf("d=%d", d), func(b *testing.B) {
			s, err := newIndependent[float32](1<<30, d, Options{Seed: testSeed(1)})
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]float32, d)
			b.SetBytes(int64(4 * d))
			for b.Loop() {
				s.next(dst)
			}
			b.ReportMetric(float64(b.N)*float64(d)/b.Elapsed().Seconds()/1e6, "Msamples/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
		})
	}
}

// BenchmarkBanded is one step of back substitution with b-1 buffered rows
// (ring full). Bytes: b-1 rows read, dst and the ring slot written.
func BenchmarkBanded(b *testing.B) {
	const n = 256
	for _, d := range benchDims {
		for _, bands := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("d=%d/b=%d", d, bands), func(b *testing.B) {
				rng := mrand.New(mrand.NewPCG(1, 2))
				c := randBanded(n, bands, rng)
				s, err := newRecursion[float32](c, d, Options{Seed: testSeed(1)})
				if err != nil {
					b.Fatal(err)
				}
				dst := make([]float32, d)
				for _, r := range s.ring {
					for k := range r {
						r[k] = 1
					}
				}
				s.step = bands // ring "full": every step reads b-1 rows
				b.SetBytes(int64(4 * d * (bands + 1)))
				for b.Loop() {
					if s.step == n {
						s.step = bands
					}
					s.next(dst)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
			})
		}
	}
}

// BenchmarkDense is the last step (i = n = 2000) of a dense lower-triangular
// encoder, stored (2000 rows read) and regenerated (2000 rows drawn).
func BenchmarkDense(b *testing.B) {
	const n = 2000
	rng := mrand.New(mrand.NewPCG(1, 3))
	c := randDenseLower(n, rng)
	for _, d := range []int{100_000} {
		b.Run(fmt.Sprintf("stored/d=%d", d), func(b *testing.B) {
			s, err := newRecursion[float32](c, d, Options{Seed: testSeed(1)})
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]float32, d)
			for _, r := range s.ring {
				for k := range r {
					r[k] = 1
				}
			}
			b.SetBytes(int64(4 * d * (n + 1)))
			for b.Loop() {
				s.step = n - 1
				s.next(dst)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
			b.ReportMetric(float64(s.memoryBytes())/1e6, "MB-held")
		})
		b.Run(fmt.Sprintf("blocked/d=%d", d), func(b *testing.B) {
			f := squareFact(b, prefixW(b, n), c, mfnoise.Metadata{})
			src, err := newNoiseSource[float32](f, d, Options{Seed: testSeed(1), MemoryBudget: 64 << 20})
			if err != nil {
				b.Fatal(err)
			}
			s := src.(*blockSource[float32])
			// The last full block, steps [t0, t0+t): one product per t steps.
			t0 := (n/s.t - 1) * s.t
			for b.Loop() {
				if s.step == t0+s.t || s.step < t0 {
					s.step = t0
					s.start = -1
				}
				s.next(make([]float32, 0, d)[:d])
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
			b.ReportMetric(float64(s.memoryBytes())/1e6, "MB-held")
			b.ReportMetric(float64(s.t), "block")
		})
		b.Run(fmt.Sprintf("regenerate/d=%d", d), func(b *testing.B) {
			f := squareFact(b, prefixW(b, n), c, mfnoise.Metadata{})
			src, err := newNoiseSource[float32](f, d, Options{Seed: testSeed(1), MemoryBudget: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			s := src.(*liveSource[float32])
			if s.kind != KindDenseRegenerate {
				b.Fatalf("kind %s", s.kind)
			}
			dst := make([]float32, d)
			for b.Loop() {
				s.step = n - 1
				s.next(dst)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
			b.ReportMetric(float64(n)*float64(b.N)*float64(d)/b.Elapsed().Seconds()/1e6, "Msamples/s")
			b.ReportMetric(float64(s.memoryBytes())/1e6, "MB-held")
		})
	}
}

// BenchmarkTreeOnline streams a 2048-step binary tree with the plain and
// the Honaker-weighted online decoder (run with -benchtime 2048x for one
// full pass), reporting the average step and the peak memory held.
func BenchmarkTreeOnline(b *testing.B) {
	const n = 2048
	for _, honaker := range []bool{false, true} {
		f := treeFact(b, prefixW(b, n), honaker)
		for _, d := range []int{1_000_000} {
			b.Run(fmt.Sprintf("honaker=%v/d=%d", honaker, d), func(b *testing.B) {
				s, err := New(f, d, Options{Seed: testSeed(1)})
				if err != nil {
					b.Fatal(err)
				}
				dst := make([]float32, d)
				peak := int64(0)
				for b.Loop() {
					if s.Step() == n {
						s, _ = New(f, d, Options{Seed: testSeed(1)})
					}
					s.Next(dst)
					peak = max(peak, s.MemoryBytes())
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
				b.ReportMetric(float64(peak)/1e6, "MB-held")
			})
		}
	}
}

// BenchmarkTallDense streams a dense G (random tall encoder with the optimal
// decoder, n = 256, m = 512) holding all of Z and in blocks under a budget;
// run with -benchtime 256x for one pass.
func BenchmarkTallDense(b *testing.B) {
	const n, d = 256, 1_000_000
	rng := mrand.New(mrand.NewPCG(1, 4))
	f := optimalFact(b, prefixW(b, n), randTall(2*n, n, rng), mfnoise.Metadata{})
	for _, budget := range []int64{0, 300 << 20} {
		b.Run(fmt.Sprintf("budget=%dMB", budget>>20), func(b *testing.B) {
			s, err := New(f, d, Options{Seed: testSeed(1), MemoryBudget: budget})
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]float32, d)
			peak := int64(0)
			for b.Loop() {
				if s.Step() == n {
					s, _ = New(f, d, Options{Seed: testSeed(1), MemoryBudget: budget})
				}
				s.Next(dst)
				peak = max(peak, s.MemoryBytes())
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(d), "ns/coord")
			b.ReportMetric(float64(peak)/1e6, "MB-held")
			b.Logf("kind %s", s.Kind())
		})
	}
}

// BenchmarkBLTNoise is one step of BLT noise: d Gaussians drawn, Nbuf
// buffers read and written. Bytes: (2 Nbuf + 1) d float32 (buffers read and
// written, output written); the "gen" variant adds the time of drawing the
// Gaussians, the "buffers" variant times only the buffer pass, which is
// what the memory bandwidth bounds.
func BenchmarkBLTNoise(b *testing.B) {
	const d = 1_000_000
	for _, nb := range []int{1, 2, 3, 4, 8} {
		p := toeplitz.BLTParams{}
		for i := range nb {
			p.Theta = append(p.Theta, 0.5+0.4*float64(i)/float64(nb))
			p.Omega = append(p.Omega, 0.4/float64(nb))
		}
		m, err := toeplitz.NewBLT("blt", 1<<30, p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("gen/d=%d/nbuf=%d", d, nb), func(b *testing.B) {
			s, err := newToeplitzSource[float32](m, d, Options{Seed: testSeed(1)})
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
			s, err := newToeplitzSource[float32](m, d, Options{Seed: testSeed(1)})
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
