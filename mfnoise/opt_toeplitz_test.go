package mfnoise

import (
	"context"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// TestToeplitzQualitySmall is issue 18's n = 64 single-participation
// figure: the full Toeplitz optimum costs about 8% over the optimal
// (non-Toeplitz) mf-single, and a 3-buffer BLT is within 2% of it.
func TestToeplitzQualitySmall(t *testing.T) {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(64)
	s := dpcore.SingleParticipation()
	opt, err := OptimizeSingle(ctx, w, &optimize.Settings{Gap: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := OptimizeToeplitz(ctx, w, s, 64, ToeplitzProblem{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	blt, err := OptimizeBLT(ctx, w, s, 3, ToeplitzProblem{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sq, _ := SqrtToeplitz(64)
	sqLoss, _, _ := sq.Loss(w, s)
	tpLoss, sens, _ := tp.Mechanism.Loss(w, s)
	bltLoss, bsens, _ := blt.Mechanism.Loss(w, s)
	if !sens.Exact || !bsens.Exact {
		t.Fatalf("sensitivities not exact: %+v %+v", sens, bsens)
	}
	if relErr(tpLoss, tp.Objective) > 1e-9 || relErr(bltLoss, blt.Objective) > 1e-9 {
		t.Fatalf("optimizer objective %v / %v, mechanism loss %v / %v", tp.Objective, blt.Objective, tpLoss, bltLoss)
	}
	r1, r2 := tpLoss/opt.Loss, bltLoss/tpLoss
	t.Logf("mf-single %.2f, toeplitz:64 %.2f (x%.4f), blt:3 %.2f (x%.4f), sqrt %.2f", opt.Loss, tpLoss, r1, bltLoss, r2, sqLoss)
	if r1 < 1.05 || r1 > 1.10 {
		t.Errorf("toeplitz:64 / mf-single = %.4f, want about 1.08", r1)
	}
	if r2 < 1-1e-9 || r2 > 1.02 {
		t.Errorf("blt:3 / toeplitz:64 = %.4f, want within 2%%", r2)
	}
	if tpLoss > sqLoss {
		t.Errorf("optimized toeplitz %v worse than its start, the square root %v", tpLoss, sqLoss)
	}
}

// TestNoMechanismBelowKBBound: no Toeplitz mechanism reports a loss below
// the dual lower bound of the (k,b) optimum, under (k,b) or min-sep
// participation (min-sep contains the (k,b) patterns, so its sensitivity
// is at least as large). A sensitivity formula applied where it does not
// hold would show up here as a loss below the bound.
func TestNoMechanismBelowKBBound(t *testing.T) {
	ctx := context.Background()
	n, k, b := 48, 4, 12
	w, _ := dpcore.PrefixSum(n)
	kb, _ := dpcore.KBParticipation(k, b)
	ms, _ := dpcore.MinSepParticipation(k, b)
	opt, err := OptimizeKB(ctx, w, kb, &optimize.Settings{Gap: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	lb := opt.LowerBound
	if !(lb > 0 && lb <= opt.Loss) {
		t.Fatalf("mf-kb bound %v, loss %v", lb, opt.Loss)
	}
	var mechs []*Toeplitz
	for _, s := range []dpcore.Schema{dpcore.SingleParticipation(), kb, ms} {
		for _, p := range []int{1, 6, 12, 24, 48} {
			r, err := OptimizeToeplitz(ctx, w, s, p, ToeplitzProblem{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			mechs = append(mechs, r.Mechanism)
		}
		for nb := 1; nb <= 4; nb++ {
			r, err := OptimizeBLT(ctx, w, s, nb, ToeplitzProblem{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			mechs = append(mechs, r.Mechanism)
		}
	}
	sq, _ := SqrtToeplitz(n)
	mechs = append(mechs, sq)
	mechs = append(mechs, testToeplitzMechs(t, n)...)
	best := math.Inf(1)
	for _, m := range mechs {
		for _, s := range []dpcore.Schema{kb, ms} {
			loss, sens, err := m.Loss(w, s)
			if err != nil {
				t.Fatal(err)
			}
			if loss < lb*(1-1e-9) {
				t.Errorf("%s under %s: loss %v below the mf-kb dual bound %v (sens %+v)", m.Name, s, loss, lb, sens)
			}
			best = math.Min(best, loss)
		}
	}
	t.Logf("mf-kb loss %.2f bound %.2f; best Toeplitz %.2f (x%.3f)", opt.Loss, lb, best, best/opt.Loss)
}

// TestOptimizeBLTUnbounded: the unbounded-stream BLT reports a sensitivity
// valid for every horizon, at least the finite-horizon one.
func TestOptimizeBLTUnbounded(t *testing.T) {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(500)
	ms, _ := dpcore.MinSepParticipation(5, 50)
	r, err := OptimizeBLT(ctx, w, ms, 3, ToeplitzProblem{Objective: MaxError, Unbounded: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Mechanism.BLT
	inf := bltUnboundedSens2(p, 5, 50)
	fin, _ := r.Mechanism.Sensitivity(ms)
	if !fin.Exact || fin.Value*fin.Value > inf*(1+1e-12) {
		t.Fatalf("finite sens %+v above the unbounded %v", fin, math.Sqrt(inf))
	}
	rows, _ := r.Mechanism.DecoderRowNorms(w)
	if got := inf * rows[len(rows)-1]; relErr(got, r.Objective) > 1e-9 {
		t.Fatalf("max-error objective %v, recomputed %v", r.Objective, got)
	}
	kb, _ := dpcore.KBParticipation(10, 50)
	if _, err := OptimizeBLT(ctx, w, kb, 2, ToeplitzProblem{Unbounded: true}, nil); err == nil {
		t.Fatal("unbounded (k,b) accepted")
	}
}

// TestCompareScaleLong is issue 18's scale target: compare at n = 1e5,
// min-sep (1000, 100), sqrt, toeplitz:64 and blt:4, in under 2 minutes
// with a heap well under 2 GiB. Long mode only.
func TestCompareScaleLong(t *testing.T) {
	if testing.Short() {
		t.Skip("long mode only (-short given): the n = 1e5 compare takes a minute")
	}
	w, _ := dpcore.PrefixSum(100_000)
	s, _ := dpcore.MinSepParticipation(1000, 100)
	specs := named(t, "sqrt,toeplitz:64,blt:4")
	start := time.Now()
	rows, err := Compare(context.Background(), w, s, specs, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("%v, heap sys %d MiB", el, ms.HeapSys>>20)
	for _, r := range rows {
		t.Logf("%s loss %.4g sens %.4g exact %v build %.2f s", r.Mechanism, r.Loss, r.Sensitivity, r.SensitivityExact, r.BuildSeconds)
		if !r.SensitivityExact {
			t.Errorf("%s: sensitivity not exact", r.Mechanism)
		}
	}
	if el > 2*time.Minute || ms.HeapSys > 1<<30 {
		t.Fatalf("took %v with %d MiB of heap (targets 2 min, well under 2 GiB)", el, ms.HeapSys>>20)
	}
	if rows[0].Mechanism != "blt:4" {
		t.Fatalf("best is %s, want blt:4", rows[0].Mechanism)
	}
}
