package mfnoise

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/rusage"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"gonum.org/v1/gonum/mat"
)

// phiEig is the textbook route to phi(v): eigendecompose
// M = D^1/2 A^T A D^1/2 and read diag and trace of M^1/2 from the
// eigenvectors. It is the reference for the polar route and the
// comparison in BenchmarkPhi.
func phiEig(g *mat.SymDense, v []float64) (diag []float64, tr float64) {
	n := len(v)
	m := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			m.SetSym(i, j, math.Sqrt(v[i]*v[j])*g.At(i, j))
		}
	}
	var e mat.EigenSym
	if !e.Factorize(m, true) {
		panic("eigendecomposition failed")
	}
	var q mat.Dense
	e.VectorsTo(&q)
	lam := e.Values(nil)
	diag = make([]float64, n)
	for k, l := range lam {
		s := math.Sqrt(l)
		tr += s
		for i := 0; i < n; i++ {
			diag[i] += q.At(i, k) * q.At(i, k) * s
		}
	}
	return diag, tr
}

func TestPolarPhiMatchesEigen(t *testing.T) {
	for _, w := range []dpcore.Workload{
		{Kind: dpcore.PrefixSumKind, N: 40},
		{Kind: dpcore.MomentumKind, N: 40, Momentum: 0.9, Schedule: dpcore.CooldownSchedule(40, 0.25, 0.05)},
	} {
		a, _ := w.Matrix()
		g := gramOf(a)
		v := make([]float64, w.N)
		for i := range v {
			v[i] = 0.5 + float64((i*7)%11)/5
		}
		var ph polarPhi
		if err := ph.compute(context.Background(), a, v); err != nil {
			t.Fatal(err)
		}
		diag, tr := phiEig(g, v)
		if math.Abs(ph.tr-tr) > 1e-11*tr {
			t.Errorf("%v: trace %v, eigen reference %v", w, ph.tr, tr)
		}
		for i := range diag {
			if math.Abs(ph.diag[i]-diag[i]) > 1e-10*diag[i] {
				t.Fatalf("%v: diag %d = %v, eigen reference %v", w, i, ph.diag[i], diag[i])
			}
		}
	}
}

// checkLowerUnitColumns checks that C is lower triangular with unit column
// norms and that the stored loss is the dense recomputation sens^2 ||B||_F^2.
func checkOptimum(t *testing.T, r *Result, schema dpcore.Schema) {
	t.Helper()
	f := r.Factorization
	n := f.N()
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if f.Encoder.At(i, j) != 0 {
				t.Fatalf("encoder not lower triangular at (%d,%d)", i, j)
			}
		}
	}
	loss, err := f.Loss(schema)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(loss-r.Loss) > 1e-9*loss {
		t.Errorf("reported loss %v, dense recomputation %v", r.Loss, loss)
	}
	a, _ := f.Workload.Matrix()
	b, err := OptimalDecoder(a, f.Encoder)
	if err != nil {
		t.Fatal(err)
	}
	var d mat.Dense
	d.Sub(b, f.Decoder)
	if mat.Norm(&d, 2) > 1e-8*mat.Norm(b, 2) {
		t.Errorf("decoder differs from A C^+ by %v", mat.Norm(&d, 2))
	}
	if !(r.LowerBound <= r.Loss) || r.Gap < 0 || math.Abs(r.Gap-(r.Loss-r.LowerBound)/r.Loss) > 1e-12 {
		t.Errorf("inconsistent bound: loss %v lower bound %v gap %v", r.Loss, r.LowerBound, r.Gap)
	}
	if f.Meta.Loss != r.Loss || f.Meta.Gap != r.Gap || f.Meta.LowerBnd != r.LowerBound {
		t.Errorf("metadata %+v does not carry the result", f.Meta)
	}
}

func TestOptimizeSinglePrefixSum(t *testing.T) {
	// Denisov et al. App. H Table 2: sqrt(Loss) of the optimal
	// single-participation prefix-sum factorization.
	cases := []struct {
		n    int
		want float64
	}{{256, 40.4}, {512, 62.0}, {1024, 94.6}, {2048, 143.6}}
	for _, c := range cases {
		if c.n > 256 && testing.Short() {
			continue
		}
		t.Run(fmt.Sprint(c.n), func(t *testing.T) {
			w, _ := dpcore.PrefixSum(c.n)
			iters := 0
			r, err := optimizeSingle(context.Background(), w, &optimize.Settings{Progress: func(p optimize.Progress) { iters = p.Iter }})
			if err != nil {
				t.Fatal(err)
			}
			got := math.Sqrt(r.Loss)
			t.Logf("n=%d sqrt(loss)=%.4f sqrt(lb)=%.4f gap=%.2e iters=%d time=%v", c.n, got, math.Sqrt(r.LowerBound), r.Gap, r.Iterations, r.Elapsed)
			if math.Abs(got-c.want) > 0.05 {
				t.Errorf("sqrt(loss) = %.4f, paper %.1f", got, c.want)
			}
			if r.Gap > 1e-4 {
				t.Errorf("gap %v > 1e-4", r.Gap)
			}
			if iters != r.Iterations {
				t.Errorf("progress saw %d iterations, result says %d", iters, r.Iterations)
			}
			checkOptimum(t, r, dpcore.SingleParticipation())
			sens, _ := r.Factorization.Sensitivity(dpcore.SingleParticipation())
			if math.Abs(sens.Value-1) > 1e-12 {
				t.Errorf("sensitivity %v, want 1", sens.Value)
			}
			for j := 0; j < c.n; j++ {
				cn := mat.Norm(r.Factorization.Encoder.ColView(j), 2)
				if math.Abs(cn-1) > 1e-12 {
					t.Fatalf("column %d norm %v, want 1 (X_ii = 1)", j, cn)
				}
			}
			if r.Factorization.Meta.Kind != "mf-single" {
				t.Errorf("kind %q", r.Factorization.Meta.Kind)
			}
		})
	}
}

func TestOptimizeSingleTightGapIsFixedPoint(t *testing.T) {
	// At a tight gap the unit-diagonal X satisfies the optimality condition
	// X^-1 G X^-1 = D diagonal (Denisov et al. Thm 3.2).
	w, _ := dpcore.PrefixSum(48)
	r, err := optimizeSingle(context.Background(), w, &optimize.Settings{Gap: 1e-10})
	if err != nil {
		t.Fatal(err)
	}
	c := r.Factorization.Encoder
	var x mat.SymDense
	x.SymOuterK(1, c.T())
	var ch mat.Cholesky
	if !ch.Factorize(&x) {
		t.Fatal("X not PD")
	}
	var xi mat.SymDense
	ch.InverseTo(&xi)
	a, _ := w.Matrix()
	var m1, m2 mat.Dense
	m1.Mul(&xi, gramOf(a))
	m2.Mul(&m1, &xi)
	off, diag := 0.0, 0.0
	for i := 0; i < 48; i++ {
		for j := 0; j < 48; j++ {
			if i == j {
				diag = math.Max(diag, math.Abs(m2.At(i, j)))
			} else {
				off = math.Max(off, math.Abs(m2.At(i, j)))
			}
		}
	}
	if off > 1e-4*diag {
		t.Errorf("X^-1 G X^-1 has off-diagonal %v vs diagonal %v", off, diag)
	}
}

func TestOptimizeSingleMomentumBeatsPostProcessing(t *testing.T) {
	const n = 64
	mw, err := dpcore.MomentumWorkload(n, 0.95, dpcore.CooldownSchedule(n, 0.25, 0.05))
	if err != nil {
		t.Fatal(err)
	}
	rm, err := optimizeSingle(context.Background(), mw, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkOptimum(t, rm, dpcore.SingleParticipation())
	pw, _ := dpcore.PrefixSum(n)
	rp, err := optimizeSingle(context.Background(), pw, nil)
	if err != nil {
		t.Fatal(err)
	}
	post := postProcessLoss(t, mw, rp.Factorization, dpcore.SingleParticipation())
	t.Logf("momentum-optimized %.4f, prefix optimum post-processed %.4f", rm.Loss, post)
	if !(rm.Loss < post) {
		t.Errorf("optimized for momentum %v, not below post-processed prefix optimum %v", rm.Loss, post)
	}
}

// postProcessLoss is the loss on workload mw of the prefix-sum factorization
// f post-processed with B' = M S^-1 B (same encoder, sens 1 single).
func postProcessLoss(t *testing.T, mw dpcore.Workload, f *Factorization, sc dpcore.Schema) float64 {
	t.Helper()
	m, _ := mw.Matrix()
	s, _ := f.Workload.Matrix()
	var sinvB, bp mat.Dense
	if err := sinvB.Solve(s, f.Decoder); err != nil {
		t.Fatal(err)
	}
	bp.Mul(m, &sinvB)
	sens, err := f.Sensitivity(sc)
	if err != nil {
		t.Fatal(err)
	}
	fro := mat.Norm(&bp, 2)
	return sens.Value * sens.Value * fro * fro
}

func TestOptimizeSingleErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := optimizeSingle(ctx, dpcore.Workload{Kind: dpcore.PrefixSumKind}, nil); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("n = 0: %v, want dpcore.ErrInvalid", err)
	}
	w, _ := dpcore.PrefixSum(16)
	if _, err := Optimize(ctx, Problem{Workload: w, Family: SingleFamily{}}, &optimize.Settings{Gap: -1}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("negative gap: %v, want dpcore.ErrInvalid", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := optimizeSingle(cctx, w, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	if _, err := optimizeSingle(ctx, w, &optimize.Settings{Gap: 1e-15, MaxIter: 2}); err == nil {
		t.Errorf("gap 1e-15 in 2 iterations: no error")
	}
}

// peakHeap samples the heap while f runs and returns the peak in MiB.
// benchmarkOptimizer runs optimize once per benchmark iteration and
// reports its peak heap, CPU seconds, iterations, loss and sqrt(loss).
func benchmarkOptimizer(b *testing.B, optimize func() (*Result, error)) {
	for b.Loop() {
		var r *Result
		var err error
		cpu0 := rusage.CPUSeconds()
		mb := peakHeap(func() { r, err = optimize() })
		cpu := rusage.CPUSeconds() - cpu0
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(mb, "peak-MiB")
		b.ReportMetric(cpu, "cpu-s")
		b.ReportMetric(float64(r.Iterations), "iters")
		b.ReportMetric(r.Loss, "loss")
		b.ReportMetric(math.Sqrt(r.Loss), "sqrt-loss")
	}
}

func peakHeap(f func()) float64 {
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		var ms runtime.MemStats
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	return float64(peak.Load()) / (1 << 20)
}

func BenchmarkOptimizeSingle(b *testing.B) {
	for _, n := range []int{256, 512, 1024, 2048} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			w, _ := dpcore.PrefixSum(n)
			benchmarkOptimizer(b, func() (*Result, error) {
				return optimizeSingle(context.Background(), w, nil)
			})
		})
	}
}

// BenchmarkPhi compares the two routes to one fixed-point step phi(v).
func BenchmarkPhi(b *testing.B) {
	for _, n := range []int{256, 512, 1024} {
		w, _ := dpcore.PrefixSum(n)
		a, _ := w.Matrix()
		g := gramOf(a)
		v := make([]float64, n)
		for i := range v {
			v[i] = 1
		}
		b.Run(fmt.Sprintf("eigen/n=%d", n), func(b *testing.B) {
			cpu0 := rusage.CPUSeconds()
			for b.Loop() {
				phiEig(g, v)
			}
			b.ReportMetric((rusage.CPUSeconds()-cpu0)/float64(b.N), "cpu-s/op")
		})
		b.Run(fmt.Sprintf("polar/n=%d", n), func(b *testing.B) {
			var ph polarPhi
			cpu0 := rusage.CPUSeconds()
			for b.Loop() {
				if err := ph.compute(context.Background(), a, v); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((rusage.CPUSeconds()-cpu0)/float64(b.N), "cpu-s/op")
		})
	}
}

// Anderson mixing solves a linear fixed point u = M u + c (in log
// coordinates, the map it is applied in) in a few more steps than the
// dimension; the plain iteration is still far from it after 8 steps.
func TestAndersonLinearFixedPoint(t *testing.T) {
	m := mat.NewDense(3, 3, []float64{0.5, 0.3, 0.1, -0.2, 0.6, 0.25, 0.1, 0.1, 0.7})
	c := []float64{0.3, -0.4, 0.2}
	var want mat.VecDense // (I - M)^-1 c
	var iMinusM mat.Dense
	iMinusM.Sub(eye(3), m)
	if err := want.SolveVec(&iMinusM, mat.NewVecDense(3, c)); err != nil {
		t.Fatal(err)
	}
	phi := func(v []float64) []float64 {
		u := make([]float64, len(v))
		for i := range v {
			u[i] = math.Log(v[i])
		}
		out := make([]float64, len(v))
		for i := range out {
			s := c[i]
			for j := range u {
				s += m.At(i, j) * u[j]
			}
			out[i] = math.Exp(s)
		}
		return out
	}
	v := []float64{1, 1, 1}
	acc := newAnderson(3, andersonMemory)
	for it := 1; it <= 8; it++ {
		acc.next(v, phi(v))
	}
	for i := range v {
		if got := math.Log(v[i]); math.Abs(got-want.AtVec(i)) > 1e-9 {
			t.Errorf("u[%d] = %v after 8 steps, fixed point %v", i, got, want.AtVec(i))
		}
	}
}

func eye(n int) *mat.Dense {
	d := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		d.Set(i, i, 1)
	}
	return d
}

// BenchmarkOptimizeSingleLarge is issue 26's n = 8192 target: the optimal
// single-participation factorization of the prefix sum at the default gap,
// with each iteration's loss, bound and gap written to stderr as it runs.
// It needs about 9 GiB (see BENCHMARKS.md); run it alone with -benchtime 1x.
func BenchmarkOptimizeSingleLarge(b *testing.B) {
	w, _ := dpcore.PrefixSum(8192)
	start := time.Now()
	set := &optimize.Settings{Progress: func(p optimize.Progress) {
		fmt.Fprintf(os.Stderr, "iter %d: loss %.8g bound %.8g gap %.3g, %.1f s wall, %.1f s cpu\n",
			p.Iter, p.Loss, p.LowerBound, p.Gap, time.Since(start).Seconds(), rusage.CPUSeconds())
	}}
	benchmarkOptimizer(b, func() (*Result, error) {
		return optimizeSingle(context.Background(), w, set)
	})
}

// An optimizer whose dense work matrices cannot fit in the memory the
// process may use is refused before it allocates, with the memory it
// would need (here a 64 MiB GOMEMLIMIT against about 576 MiB).
func TestOptimizersRefuseWhatCannotFit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(64 << 20))
	w, _ := dpcore.PrefixSum(2048)
	sc, _ := dpcore.KBParticipation(2, 1024)
	for name, run := range map[string]func() (*Result, error){
		"single": func() (*Result, error) { return optimizeSingle(context.Background(), w, nil) },
		"kb":     func() (*Result, error) { return optimizeKB(context.Background(), w, sc, nil, kbToeplitzStart) },
		"banded": func() (*Result, error) { return optimizeBanded(context.Background(), w, 8, nil, bandedAuto) },
	} {
		_, err := run()
		if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "would need about") {
			t.Errorf("%s: %v, want a refusal with the memory needed", name, err)
		}
	}
}
