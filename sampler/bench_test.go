package sampler

import (
	"math"
	"testing"
)

// The benchmark scale of the brief: m = 10^7 examples, q = 0.001, so an
// expected batch of 10^4 per step.
const (
	benchM     = 10_000_000
	benchQ     = 0.001
	benchB     = 10_000
	benchSteps = math.MaxInt32
)

func benchNext(b *testing.B, s Sampler) {
	b.Helper()
	buf := make([]int, 0, 2*benchB)
	var total int
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = s.Next(buf)
		if err != nil {
			b.Fatal(err)
		}
		total += len(buf)
	}
	b.ReportMetric(float64(total)/float64(b.N), "examples/step")
}

// mustB fails a benchmark whose setup fails (setup arguments are constants).
func mustB(s Sampler, err error) Sampler {
	if err != nil {
		panic(err)
	}
	return s
}

func BenchmarkPoissonNext(b *testing.B) {
	benchNext(b, mustB(NewPoisson(benchM, benchQ, benchSteps, seed(1))))
}

func BenchmarkBandPoissonNext(b *testing.B) {
	for _, bc := range []struct {
		name  string
		bands int
		fixed bool
	}{{"bands=1", 1, false}, {"bands=10", 10, false}, {"bands=10/fixedSize", 10, true}} {
		b.Run(bc.name, func(b *testing.B) {
			benchNext(b, mustB(NewBandPoisson(benchM, benchB, bc.bands, benchSteps, bc.fixed, seed(1))))
		})
	}
}

func BenchmarkFixedOrderNext(b *testing.B) {
	benchNext(b, mustB(NewFixedOrder(benchM, benchB, benchSteps, seed(1))))
}

// BenchmarkShuffleEpoch times whole epochs (m/B = 1000 steps) so the O(m)
// partition drawn at each epoch start is amortized; ns/step is the average.
func BenchmarkShuffleEpoch(b *testing.B) {
	s := mustB(NewShuffle(benchM, benchB, benchSteps, seed(1)))
	steps := benchM / benchB
	buf := make([]int, 0, benchB)
	b.ReportAllocs()
	for b.Loop() {
		for range steps {
			var err error
			if buf, err = s.Next(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*steps), "ns/step")
}

func BenchmarkMinSepNext(b *testing.B) {
	benchNext(b, mustB(NewMinSep(benchM, benchB, 10, 100, benchSteps-1, benchQ, seed(1))))
}

// BenchmarkNew measures the one-time O(m) setup: B/op is its memory.
func BenchmarkNew(b *testing.B) {
	for _, bc := range []struct {
		name string
		mk   func() (Sampler, error)
	}{
		{"Poisson", func() (Sampler, error) { return NewPoisson(benchM, benchQ, benchSteps, seed(1)) }},
		{"BandPoisson/bands=10", func() (Sampler, error) {
			return NewBandPoisson(benchM, benchB, 10, benchSteps, false, seed(1))
		}},
		{"FixedOrder", func() (Sampler, error) { return NewFixedOrder(benchM, benchB, benchSteps, seed(1)) }},
		{"Shuffle", func() (Sampler, error) { return NewShuffle(benchM, benchB, benchSteps, seed(1)) }},
		{"MinSep", func() (Sampler, error) { return NewMinSep(benchM, benchB, 10, 100, benchSteps-1, benchQ, seed(1)) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.mk(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMarshal: saving mid-run. Min-sep saves O(m) participation
// records; the others only the generator.
func BenchmarkMarshal(b *testing.B) {
	for _, bc := range []struct {
		name string
		s    Sampler
	}{
		{"BandPoisson", mustB(NewBandPoisson(benchM, benchB, 10, benchSteps, false, seed(1)))},
		{"MinSep", mustB(NewMinSep(benchM, benchB, 10, 100, benchSteps-1, benchQ, seed(1)))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				data, err := bc.s.MarshalBinary()
				if err != nil {
					b.Fatal(err)
				}
				n = len(data)
			}
			b.ReportMetric(float64(n), "state-bytes")
		})
	}
}
