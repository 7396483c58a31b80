package mfnoise

import (
	"context"
	"errors"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// TestOptimizeRefusals: the door refuses what no family can answer with
// dpcore.ErrInvalid, before any work: no family, bad settings, a schema
// the family is not for, a Toeplitz problem with both or neither shape.
func TestOptimizeRefusals(t *testing.T) {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(16)
	kb, _ := dpcore.KBParticipation(2, 8)
	for name, p := range map[string]Problem{
		"no family":     {Workload: w},
		"single on kb":  {Workload: w, Schema: kb, Family: SingleFamily{}},
		"kb on single":  {Workload: w, Family: KBFamily{}},
		"0 bands":       {Workload: w, Family: BandedFamily{}},
		"toeplitz 0":    {Workload: w, Family: ToeplitzFamily{}},
		"blt 33":        {Workload: w, Family: BLTFamily{Buffers: 33}},
		"unbounded kb":  {Workload: w, Schema: kb, Family: BLTFamily{Buffers: 2, Unbounded: true}},
		"bad gap below": {Workload: w, Family: BandedFamily{Bands: 2}},
	} {
		set := (*optimize.Settings)(nil)
		if name == "bad gap below" {
			set = &optimize.Settings{Gap: -1}
		}
		if _, err := Optimize(ctx, p, set); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: %v, want dpcore.ErrInvalid", name, err)
		}
	}
}

// TestOptimizeZeroSchemaIsSingle: the zero Schema means single
// participation, the schema a Toeplitz family is then optimized for.
func TestOptimizeZeroSchemaIsSingle(t *testing.T) {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(32)
	a, err := Optimize(ctx, Problem{Workload: w, Family: BLTFamily{Buffers: 2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Optimize(ctx, Problem{Workload: w, Schema: dpcore.SingleParticipation(), Family: BLTFamily{Buffers: 2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Loss != b.Loss || a.Toeplitz == nil || a.Factorization != nil {
		t.Fatalf("zero schema: loss %v, single: %v (%+v)", a.Loss, b.Loss, a)
	}
	loss, _, err := a.Toeplitz.Loss(w, dpcore.SingleParticipation())
	if err != nil || mftest.RelErr(loss, a.Loss) > 1e-9 {
		t.Fatalf("reported loss %v, the encoder's %v (%v)", a.Loss, loss, err)
	}
}
