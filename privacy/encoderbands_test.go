package privacy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// overBanded declares bandmf:2's structure but builds a 4-banded encoder.
type overBanded struct{ mfnoise.BandMF }

func (overBanded) String() string { return "over-banded" }

func (overBanded) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt mfnoise.BuildOptions) (dpcore.Strategy, error) {
	return mfnoise.BandMF{Bands: 4}.Build(ctx, w, schema, opt)
}

// Amplified accounting relies on the encoder's band count, so the plan
// reads it off the encoder it built or loaded, not the mechanism's
// declaration: a cache entry for bandmf:2 that holds a 4-banded encoder
// (intact checksum, A = BC, its key) and a mechanism that declares 2 bands
// and builds 4 are refused with 2 partitions, where Thm 4 needs bands <=
// partitions; the honest bandmf:2 and the 4-banded one under 4 partitions
// are planned.
func TestAmplificationChecksEncoderBands(t *testing.T) {
	ctx := context.Background()
	const m, batch, n = 1000, 50, 20
	w, _ := dpcore.PrefixSum(n)
	cache := &mfnoise.Cache{Dir: t.TempDir()}
	four, err := mfnoise.BuildDense(ctx, mfnoise.BandMF{Bands: 4}, w, dpcore.SingleParticipation(), mfnoise.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := mfnoise.EncoderBands(four); got != 4 {
		t.Fatalf("bandmf:4's encoder has %d bands", got)
	}
	key := mfnoise.ProblemKey{Kind: "bandmf", Workload: w, Bands: 2, Stamps: 1}
	if _, _, err := cache.GetOrBuild(ctx, key, func(context.Context) (*mfnoise.Factorization, error) { return four, nil }); err != nil {
		t.Fatal(err)
	}
	req := Request{Examples: m, Batch: batch, Steps: n, ClipNorm: 1, NoiseMultiplier: 1, Sampling: SamplingBandPoisson, Accountant: RDP}

	poisoned := req
	poisoned.Mechanism, poisoned.Build = mfnoise.BandMF{Bands: 2}, mfnoise.BuildOptions{Cache: cache}
	liar := req
	liar.Mechanism = overBanded{mfnoise.BandMF{Bands: 2}}
	for name, r := range map[string]Request{"cached bandmf:2 holding 4 bands": poisoned, "declares 2, builds 4": liar} {
		p, _, err := NewPlan(ctx, r)
		var ref *Refusal
		if !errors.As(err, &ref) || ref.Rule != RuleAmplification || !strings.Contains(err.Error(), "has 4") {
			if p != nil {
				got, _ := mfnoise.EncoderBands(p.Strategy())
				t.Errorf("%s: planned with %d partitions and an encoder of %d bands (epsilon %v)", name, p.Accounting.Bands, got, p.Epsilon)
				continue
			}
			t.Errorf("%s: want a refusal by the amplification rule naming 4 bands, got %v", name, err)
		}
	}

	honest := req
	honest.Mechanism = mfnoise.BandMF{Bands: 2}
	if _, _, err := NewPlan(ctx, honest); err != nil {
		t.Fatalf("bandmf:2: %v", err)
	}
	wide := liar
	wide.Mechanism, wide.Partitions = mfnoise.BandMF{Bands: 4}, 4
	if _, _, err := NewPlan(ctx, wide); err != nil {
		t.Fatalf("bandmf:4 with 4 partitions: %v", err)
	}
}

// EncoderBands reads the band count off the nonzero entries, for dense
// and Toeplitz strategies alike.
func TestEncoderBands(t *testing.T) {
	ctx := context.Background()
	w, _ := dpcore.PrefixSum(12)
	single := dpcore.SingleParticipation()
	for _, tc := range []struct {
		mech Mechanism
		want int
	}{
		{mfnoise.DPSGD{}, 1},
		{mfnoise.BandMF{Bands: 3}, 3},
		{mfnoise.BandedToeplitz{Bands: 5}, 5},
		{mfnoise.BandedSqrt{Bands: 2}, 2},
		{mfnoise.Sqrt{}, 12},
		{mfnoise.BISR{Bands: 2}, 12},
	} {
		s, err := tc.mech.Build(ctx, w, single, mfnoise.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := mfnoise.EncoderBands(s)
		if err != nil || got != tc.want {
			t.Errorf("%s: %d bands (%v), want %d", tc.mech, got, err, tc.want)
		}
		f, err := mfnoise.Dense(s)
		if err != nil {
			t.Fatal(err)
		}
		if dense, _ := mfnoise.EncoderBands(f); dense != got {
			t.Errorf("%s: %d bands read densely, %d from the strategy", tc.mech, dense, got)
		}
	}
}
