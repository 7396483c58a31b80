package clip

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/blas"
	"github.com/dpmf-go/dpmf/internal/rusage"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

func installBLAS() {
	if os.Getenv("DPMF_GONUM_BLAS") == "" {
		blas.Install()
	}
}

// BenchmarkCIFARCNN measures one batched step (forward, backward, norms and
// clipped sum) of the Kairouz et al. CIFAR-10 CNN on 32x32x3 inputs,
// private (flat clipping) and non-private through the same code.
//
// The fast GEMM (package blas) is installed unless DPMF_GONUM_BLAS=1 asks
// for gonum's pure-Go products, for comparison.
func BenchmarkCIFARCNN(b *testing.B) {
	benchSteps(b, []int{64, 256, 500}, 64, func() (models.Model, error) {
		return models.NewCIFARCNN([3]int{3, 32, 32}, 10, 1)
	})
}

// BenchmarkWRN16x4 is one step of WideResNet-16-4 with GroupNorm(16) (De
// et al. 2022's CIFAR-10 model, 2,751,146 parameters) on 32x32x3 inputs,
// private and non-private; bench/compare_wrn.sh runs it side by side with
// the same network in PyTorch (clip/testdata/wrn_torch.py).
func BenchmarkWRN16x4(b *testing.B) {
	benchSteps(b, []int{16, 32, 64}, 16, func() (models.Model, error) {
		return models.NewWRN16x4([3]int{3, 32, 32}, 10, 16, 1)
	})
}

// benchSteps runs sub-benchmarks batch=B/private=P of one ClippedSum step
// of the model newModel builds, for every batch size (those above short
// skipped in -short mode; DPMF_BENCH_BATCHES="8 24" runs other sizes),
// reporting examples/s, examples/cpu-s, heapMiB, maxRSS-MiB and
// gemm-bound: the step's matrix products, each timed alone at its real
// shape and layout on one core (nn.Plan.TimeProducts, the fastest of its
// runs), summed and divided by the workers, as a fraction of the step's
// wall time (1 would mean the step does nothing but its products, each at
// its best speed, on every core all the time); gemm-bound-cpu is the same
// in CPU seconds (the products' time on one core against the step's CPU
// time on all), which other jobs on the machine disturb less.
// DPMF_BENCH_PRODUCTS=1 also logs each product's share.
func benchSteps(b *testing.B, batches []int, short int, newModel func() (models.Model, error)) {
	installBLAS()
	if env := os.Getenv("DPMF_BENCH_BATCHES"); env != "" {
		batches = nil
		for _, f := range strings.Fields(strings.ReplaceAll(env, ",", " ")) {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				b.Fatalf("DPMF_BENCH_BATCHES=%q: %q is not a positive batch size", env, f)
			}
			batches = append(batches, n)
		}
		short = math.MaxInt
	}
	for _, batch := range batches {
		for _, private := range []bool{false, true} {
			name := fmt.Sprintf("batch=%d/private=%v", batch, private)
			b.Run(name, func(b *testing.B) {
				if testing.Short() && batch > short {
					b.Skip("large batch in -short mode")
				}
				m, err := newModel()
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
				cpu0 := rusage.CPUSeconds()
				b.ResetTimer()
				for b.Loop() {
					if _, err := e.ClippedSum(x, y, dst); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				cpu := rusage.CPUSeconds() - cpu0
				runtime.ReadMemStats(&ms)
				n := float64(batch) * float64(b.N)
				b.ReportMetric(n/b.Elapsed().Seconds(), "examples/s")
				// On a machine shared with other jobs wall time overstates
				// the cost; CPU seconds per example do not depend on how
				// many cores we got.
				b.ReportMetric(n/cpu, "examples/cpu-s")
				b.ReportMetric(float64(ms.HeapSys)/(1<<20), "heapMiB")
				b.ReportMetric(rusage.MaxRSSMiB(), "maxRSS-MiB")
				bound, err := gemmBound(b, e, x, y, dst)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(bound.Seconds()/(b.Elapsed().Seconds()/float64(b.N)), "gemm-bound")
				// The same in CPU time (the products' time on one core
				// against the step's CPU seconds over all cores): on a
				// shared machine, where wall time counts the other jobs'
				// turns, the comparable figure.
				b.ReportMetric(bound.Seconds()*float64(e.plan.Workers())/(cpu/float64(b.N)), "gemm-bound-cpu")
			})
		}
	}
}

// gemmBound is the time the products of one step of e on x, y take alone
// (see benchSteps), split over the plan's workers.
func gemmBound(b *testing.B, e *Engine, x []float32, y []int, dst []float32) (time.Duration, error) {
	e.plan.RecordProducts(true)
	_, err := e.ClippedSum(x, y, dst)
	list := e.plan.Products()
	e.plan.RecordProducts(false)
	if err != nil {
		return 0, err
	}
	var logf func(string, ...any)
	if os.Getenv("DPMF_BENCH_PRODUCTS") != "" {
		logf = b.Logf
	}
	total, err := nn.Bound(list, e.plan.TimeProducts, logf)
	if err != nil {
		return 0, err
	}
	return total / time.Duration(e.plan.Workers()), nil
}

// BenchmarkCIFARCNNPoisson is the private step with batch sizes varying as
// Poisson sampling with mean 64 gives (MaxBatch 80): the executor's plan
// does not depend on the batch size, so nothing is padded or rebuilt.
func BenchmarkCIFARCNNPoisson(b *testing.B) {
	installBLAS()
	m, err := models.NewCIFARCNN([3]int{3, 32, 32}, 10, 1)
	if err != nil {
		b.Fatal(err)
	}
	e, err := New(m, Options{Norm: 1, MaxBatch: 80})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{58, 71, 64, 77, 61, 69}
	x, y := randBatch(rng, 80, e.chw, 10)
	dst := make([]float32, m.NumParams())
	cpu0 := rusage.CPUSeconds()
	examples := 0
	k := 0
	for b.Loop() {
		n := sizes[k%len(sizes)]
		k++
		if _, err := e.ClippedSum(x[:n*e.chw], y[:n], dst); err != nil {
			b.Fatal(err)
		}
		examples += n
	}
	b.ReportMetric(float64(examples)/b.Elapsed().Seconds(), "examples/s")
	b.ReportMetric(float64(examples)/(rusage.CPUSeconds()-cpu0), "examples/cpu-s")
	b.ReportMetric(rusage.MaxRSSMiB(), "maxRSS-MiB")
}
