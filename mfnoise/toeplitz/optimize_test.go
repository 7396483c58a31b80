package toeplitz_test

import (
	"context"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// TestToeplitzQualitySmall is issue 18's n = 64 single-participation
// figure: the full Toeplitz optimum costs about 8% over the optimal
// (non-Toeplitz) mf-single, and a 3-buffer BLT is within 2% of it.
func TestToeplitzQualitySmall(t *testing.T) {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(64)
	schema := dpcore.SingleParticipation()
	opt, err := mfnoise.Optimize(ctx, mfnoise.Problem{Workload: w, Family: mfnoise.SingleFamily{}}, &optimize.Settings{Gap: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	tp, tpRun, err := toeplitz.Optimize(ctx, toeplitz.Problem{Workload: w, Schema: schema, Bands: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	blt, bltRun, err := toeplitz.Optimize(ctx, toeplitz.Problem{Workload: w, Schema: schema, Buffers: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sq, _ := toeplitz.Sqrt(64)
	sqLoss, _, _ := sq.Loss(w, schema)
	tpLoss, sens, _ := tp.Loss(w, schema)
	bltLoss, bsens, _ := blt.Loss(w, schema)
	if !sens.Exact || !bsens.Exact {
		t.Fatalf("sensitivities not exact: %+v %+v", sens, bsens)
	}
	if mftest.RelErr(tpLoss, tpRun.Loss) > 1e-9 || mftest.RelErr(bltLoss, bltRun.Loss) > 1e-9 {
		t.Fatalf("optimizer objective %v / %v, mechanism loss %v / %v", tpRun.Loss, bltRun.Loss, tpLoss, bltLoss)
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
	opt, err := mfnoise.Optimize(ctx, mfnoise.Problem{Workload: w, Schema: kb, Family: mfnoise.KBFamily{}}, &optimize.Settings{Gap: 1e-6})
	if err != nil {
		t.Fatal(err)
	}
	lb := opt.LowerBound
	if !(lb > 0 && lb <= opt.Loss) {
		t.Fatalf("mf-kb bound %v, loss %v", lb, opt.Loss)
	}
	var mechs []*toeplitz.Encoder
	for _, schema := range []dpcore.Schema{dpcore.SingleParticipation(), kb, ms} {
		for _, p := range []int{1, 6, 12, 24, 48} {
			r, _, err := toeplitz.Optimize(ctx, toeplitz.Problem{Workload: w, Schema: schema, Bands: p}, nil)
			if err != nil {
				t.Fatal(err)
			}
			mechs = append(mechs, r)
		}
		for nb := 1; nb <= 4; nb++ {
			r, _, err := toeplitz.Optimize(ctx, toeplitz.Problem{Workload: w, Schema: schema, Buffers: nb}, nil)
			if err != nil {
				t.Fatal(err)
			}
			mechs = append(mechs, r)
		}
	}
	sq, _ := toeplitz.Sqrt(n)
	mechs = append(mechs, sq)
	mechs = append(mechs, testEncoders(t, n)...)
	best := math.Inf(1)
	for _, m := range mechs {
		for _, schema := range []dpcore.Schema{kb, ms} {
			loss, sens, err := m.Loss(w, schema)
			if err != nil {
				t.Fatal(err)
			}
			if loss < lb*(1-1e-9) {
				t.Errorf("%s under %s: loss %v below the mf-kb dual bound %v (sens %+v)", m.Name, schema, loss, lb, sens)
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
	r, run, err := toeplitz.Optimize(ctx, toeplitz.Problem{Workload: w, Schema: ms, Buffers: 3, Objective: toeplitz.MaxError, Unbounded: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := r.BLT
	inf := toeplitz.BLTUnboundedSens2(p, 5, 50)
	fin, _ := r.Sensitivity(ms)
	if !fin.Exact || fin.Value*fin.Value > inf*(1+1e-12) {
		t.Fatalf("finite sens %+v above the unbounded %v", fin, math.Sqrt(inf))
	}
	rows, _ := r.DecoderRowNorms(w)
	if got := inf * rows[len(rows)-1]; mftest.RelErr(got, run.Loss) > 1e-9 {
		t.Fatalf("max-error objective %v, recomputed %v", run.Loss, got)
	}
	kb, _ := dpcore.KBParticipation(10, 50)
	if _, _, err := toeplitz.Optimize(ctx, toeplitz.Problem{Workload: w, Schema: kb, Buffers: 2, Unbounded: true}, nil); err == nil {
		t.Fatal("unbounded (k,b) accepted")
	}
}
