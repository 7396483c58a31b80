package mfnoise

import (
	"context"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
)

// A build trace hears what each optimizer proved: the loss, the lower
// bound and the gap the factorization carries (mf-kb, bandmf), or the
// loss alone for a family without a bound (toeplitz), and the status.
func TestBuildTraceCertifiesTheResult(t *testing.T) {
	const n = 60
	w, _ := dpcore.MomentumWorkload(n, 0.9, dpcore.CooldownSchedule(n, 0.25, 0.05))
	sc, _ := dpcore.KBParticipation(6, 10)
	type cert struct {
		kind             string
		loss, bound, gap float64
		status           optimize.Status
	}
	var got []cert
	ctx := WithBuildTrace(context.Background(), &BuildTrace{Certified: func(kind string, _ int, loss, bound, gap float64, status optimize.Status) {
		got = append(got, cert{kind, loss, bound, gap, status})
	}})
	for _, m := range []Mechanism{MFKB{}, BandMF{Bands: 10}} {
		got = got[:0]
		f, err := BuildDense(ctx, m, w, sc, BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("%v: %d certificates, want 1", m, len(got))
		}
		c, meta := got[0], f.Meta
		t.Logf("%v: %+v", m, c)
		if c.loss != meta.Loss || c.bound != meta.LowerBnd || c.gap != meta.Gap || c.status != optimize.Converged ||
			!(c.bound > 0 && c.bound <= c.loss) || c.gap > defaultBandedGap {
			t.Errorf("%v: certificate %+v, factorization loss %v bound %v gap %v", m, c, meta.Loss, meta.LowerBnd, meta.Gap)
		}
	}
	got = got[:0]
	if _, err := (BandedToeplitz{Bands: 4}).Build(ctx, w, sc, BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].kind != "toeplitz:4" || !(got[0].loss > 0) || got[0].bound != 0 || got[0].gap != 0 {
		t.Errorf("toeplitz:4: certificates %+v, want one with a loss and no bound", got)
	}
}
