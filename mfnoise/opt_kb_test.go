package mfnoise

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"
)

func TestKBDualGradient(t *testing.T) {
	w, _ := PrefixSum(12)
	a, _ := w.Matrix()
	sc, _ := KBParticipation(3, 4)
	p := newKBDual(context.Background(), a, sc)
	p.addNeg([][2]int{{0, 1}, {2, 7}, {5, 11}})
	z := make([]float64, p.dim())
	for i := range z {
		z[i] = 0.1 * math.Sin(float64(3*i+1))
		if i < 4 {
			z[i] += 2
		}
	}
	g := make([]float64, len(z))
	p.eval(z, g)
	checkCentralDifferences(func(z []float64) float64 { return p.eval(z, nil) }, z, g, nil, 1e-5, func(i int, fd float64) {
		t.Errorf("grad[%d] = %v, finite difference %v", i, g[i], fd)
	})
}

// checkKB checks the properties every (k,b) optimum must have.
func checkKB(t *testing.T, r *OptimizeResult, sc Schema) {
	t.Helper()
	f := r.Factorization
	sens, err := f.Sensitivity(sc)
	if err != nil {
		t.Fatal(err)
	}
	if !sens.Exact || sens.Method != NonnegativeGram || math.Abs(sens.Value-1) > 1e-9 {
		t.Errorf("sensitivity %+v, want exact 1 via the nonnegative Gram path", sens)
	}
	if f.Meta.Kind != "mf-kb" || f.Meta.Schema != sc {
		t.Errorf("meta %+v", f.Meta)
	}
	checkOptimum(t, r, sc)
}

func TestOptimizeKBSmall(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ n, k, b int }{{12, 3, 4}, {60, 6, 10}, {64, 4, 16}} {
		t.Run(fmt.Sprintf("n=%d,k=%d,b=%d", c.n, c.k, c.b), func(t *testing.T) {
			w, _ := PrefixSum(c.n)
			sc, _ := KBParticipation(c.k, c.b)
			r, err := OptimizeKB(ctx, w, sc, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkKB(t, r, sc)
			if r.Gap > 1e-4 {
				t.Errorf("gap %v", r.Gap)
			}
			// The single-participation optimum is feasible under (k,b) once
			// rescaled by its sensitivity there, so it cannot do better.
			rs, err := OptimizeSingle(ctx, w, &OptimizeSettings{Gap: 1e-8})
			if err != nil {
				t.Fatal(err)
			}
			rescored, err := rs.Factorization.Loss(sc)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("(k,b) optimum %.6g [lower bound %.6g], single optimum rescored %.6g, iters %d", r.Loss, r.LowerBound, rescored, r.Iterations)
			if !(r.Loss <= rescored) || !(r.LowerBound <= r.Loss) {
				t.Errorf("loss %v, lower bound %v, rescored single optimum %v", r.Loss, r.LowerBound, rescored)
			}
		})
	}
}

func TestOptimizeKBOneEpochIsSingle(t *testing.T) {
	ctx := context.Background()
	w, _ := PrefixSum(32)
	sc, _ := KBParticipation(1, 32)
	r, err := OptimizeKB(ctx, w, sc, &OptimizeSettings{Gap: 1e-7})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := OptimizeSingle(ctx, w, &OptimizeSettings{Gap: 1e-7})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Loss-rs.Loss) > 2e-7*rs.Loss {
		t.Errorf("(1,n) optimum %v, single-participation optimum %v", r.Loss, rs.Loss)
	}
}

func TestOptimizeKBErrors(t *testing.T) {
	ctx := context.Background()
	w, _ := PrefixSum(12)
	if _, err := OptimizeKB(ctx, w, SingleParticipation(), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("single schema: %v", err)
	}
	sc, _ := KBParticipation(2, 5)
	if _, err := OptimizeKB(ctx, w, sc, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("k*b < n: %v", err)
	}
	sc, _ = KBParticipation(3, 4)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := OptimizeKB(cctx, w, sc, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestOptimizeKBPaper checks the multi-epoch paper's Table 1 at
// (k,b) = (20,100), n = 2000: MF(k=1) scored under (20,100) is 1.6e6,
// MF(k=20) is 6.5e5 with dual lower bound 6.53e5.
func TestOptimizeKBPaper(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: paper-scale optimization takes minutes")
	}
	// The dual does not yet reach gap 1e-4 at k = 20, n = 2000 in a
	// reasonable time (BENCHMARKS.md): run it only when asked.
	if os.Getenv("DPMF_KB_PAPER") == "" {
		t.Skip("requires DPMF_KB_PAPER=1: the (20,100), n = 2000 optimization takes hours")
	}
	ctx := context.Background()
	w, _ := PrefixSum(2000)
	sc, _ := KBParticipation(20, 100)
	rs, err := OptimizeSingle(ctx, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	single, err := rs.Factorization.Loss(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MF(k=1, n=2000) under (20,100): %.4g (paper 1.6e6), %v", single, rs.Elapsed)
	if math.Abs(single-1.6e6) > 0.05e6 {
		t.Errorf("MF(k=1) rescored %v, paper 1.6e6", single)
	}
	r, err := OptimizeKB(ctx, w, sc, &OptimizeSettings{Progress: func(p OptimizeProgress) {
		t.Logf("iter %d loss %.6g lower bound %.6g gap %.2e", p.Iter, p.Loss, p.LowerBound, p.Gap)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MF(k=20, n=2000): loss %.6g lower bound %.6g gap %.2e iters %d time %v", r.Loss, r.LowerBound, r.Gap, r.Iterations, r.Elapsed)
	checkKB(t, r, sc)
	if math.Abs(r.Loss-6.5e5) > 0.05e5 || math.Abs(r.LowerBound-6.53e5) > 0.01e5 {
		t.Errorf("loss %v (paper 6.5e5), lower bound %v (paper 6.53e5)", r.Loss, r.LowerBound)
	}
}

func BenchmarkOptimizeKB(b *testing.B) {
	w, _ := PrefixSum(2000)
	sc, _ := KBParticipation(20, 100)
	for b.Loop() {
		var r *OptimizeResult
		var err error
		cpu0 := cpuSeconds()
		mb := peakHeap(func() { r, err = OptimizeKB(context.Background(), w, sc, nil) })
		cpu := cpuSeconds() - cpu0
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(mb, "peak-MiB")
		b.ReportMetric(cpu, "cpu-s")
		b.ReportMetric(float64(r.Iterations), "iters")
		b.ReportMetric(r.Loss, "loss")
	}
}
