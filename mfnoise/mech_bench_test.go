package mfnoise

import (
	"context"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/rusage"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// BenchmarkMechanism builds and scores each closed-form mechanism at the
// multi-epoch paper's scale: prefix sum, n = 2000, (k,b) = (20,100).
func BenchmarkMechanism(b *testing.B) {
	w, _ := dpcore.PrefixSum(2000)
	schema, _ := dpcore.KBParticipation(20, 100)
	for _, spec := range named(b, "dpsgd,tree-online,tree-full,fft,fft-opt,tree-online/s10,tree-full/s5,fft/s5,fft-opt/s5") {
		b.Run(spec.String(), func(b *testing.B) {
			cpu := rusage.CPUSeconds()
			for b.Loop() {
				if _, err := compareOne(context.Background(), spec, w, schema, BuildOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((rusage.CPUSeconds()-cpu)/float64(b.N), "cpu-s/op")
		})
	}
}

// minSepEncoders returns a 100-banded and a dense lower-triangular encoder
// over 2000 steps (Toeplitz with decaying entries, like optimized ones).
func minSepEncoders() (banded, dense *mat.Dense) {
	const n = 2000
	banded = mat.NewDense(n, n, nil)
	dense = mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			v := 1 / math.Sqrt(float64(i-j+1))
			dense.Set(i, j, v)
			if i-j < 100 {
				banded.Set(i, j, v)
			}
		}
	}
	return banded, dense
}

// BenchmarkMinSepSensitivity is Sensitivity under (k,b) = (20,100)-min-sep
// at n = 2000: Gram matrix plus the O(n^2 k) dynamic program.
func BenchmarkMinSepSensitivity(b *testing.B) {
	banded, dense := minSepEncoders()
	schema, _ := dpcore.MinSepParticipation(20, 100)
	for _, c := range []struct {
		name string
		c    *mat.Dense
	}{{"banded", banded}, {"dense", dense}} {
		b.Run(c.name, func(b *testing.B) {
			cpu := rusage.CPUSeconds()
			for b.Loop() {
				if _, err := sensitivity.Of(c.c, schema); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((rusage.CPUSeconds()-cpu)/float64(b.N), "cpu-s/op")
		})
		b.Run(c.name+"/dp-only", func(b *testing.B) {
			// The Gram matrix computed once: the DP (with its checks) alone.
			x := linalg.Gram(c.c)
			cpu := rusage.CPUSeconds()
			for b.Loop() {
				if _, err := sensitivity.FromGram(c.c, x, schema); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((rusage.CPUSeconds()-cpu)/float64(b.N), "cpu-s/op")
		})
	}
}
