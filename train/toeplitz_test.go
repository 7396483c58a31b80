package train

import (
	"context"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/noise"
	"gonum.org/v1/gonum/mat"
)

// TestToeplitzRunBeyondDenseLimit: a blt:4 run of 20000 steps, past
// dpcore.DenseStepLimit, is planned and steps without an n x n matrix
// (before, the planner refused it: the dense factorization would need
// 14.9 GiB). Its noise source keeps the mechanism's 4 buffers of d float32
// and nothing that grows with n; a few steps are taken, not the run.
func TestToeplitzRunBeyondDenseLimit(t *testing.T) {
	const n = 20000
	cfg := baseConfig(t)
	cfg.Privacy.Steps, cfg.Privacy.Mechanism = n, parseMech(t, "blt:4")
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	d := tr.model.NumParams()
	if _, ok := tr.plan.Strategy().(interface {
		Matrices() (*mat.Dense, *mat.Dense, error)
	}); n <= dpcore.DenseStepLimit || !ok {
		t.Fatalf("n = %d, limit %d, plan strategy %T", n, dpcore.DenseStepLimit, tr.plan.Strategy())
	}
	if _, _, err := tr.plan.Strategy().Matrices(); err == nil {
		t.Fatalf("n = %d: the plan's strategy is dense", n)
	}
	if k, mem := tr.noise.Kind(), tr.noise.MemoryBytes(); k != noise.KindBLTBuffers || mem != int64(4*4*d+32) {
		t.Fatalf("noise %s holding %d bytes, want %s with 4 buffers of d = %d float32 (%d bytes)", k, mem, noise.KindBLTBuffers, d, 4*4*d+32)
	}
	for range 3 {
		if _, err := tr.TrainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if tr.Step() != 3 || tr.noise.Step() != 3 {
		t.Fatalf("trainer at step %d, noise at %d, want 3", tr.Step(), tr.noise.Step())
	}
}
