package mfnoise

import (
	"context"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// TestBandedSqrtMatchesDense: the banded square root's O(n) strategy has
// the encoder it claims (the square root's first b coefficients, zero
// below the band), and its sensitivity under every schema kind and its
// loss agree with the dense factorization's (1e-12 relative); with b = n
// it is the square root.
func TestBandedSqrtMatchesDense(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 7, 40} {
		prefix, _ := dpcore.PrefixSum(n)
		mom, _ := dpcore.MomentumWorkload(n, 0.9, dpcore.ConstantSchedule(1))
		sq, _ := toeplitz.Sqrt(n)
		for _, b := range []int{1, 3, n} {
			if b > n {
				continue
			}
			m := BandedSqrt{Bands: b}
			if st := m.Structure(); st.Bands != b || st.Independent || st.AutoBands {
				t.Fatalf("%v: structure %+v", m, st)
			}
			for _, w := range []dpcore.Workload{prefix, mom} {
				schemas := []dpcore.Schema{dpcore.SingleParticipation()}
				if n >= 4 {
					kb, _ := dpcore.KBParticipation((n+3)/4, 4)
					ms, _ := dpcore.MinSepParticipation((n+3)/4, 4)
					schemas = append(schemas, kb, ms)
				}
				st, err := m.Build(ctx, w, dpcore.SingleParticipation(), BuildOptions{})
				if err != nil {
					t.Fatal(err)
				}
				f, err := Dense(st)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					for j := 0; j < n; j++ {
						want := 0.0
						if i >= j && i-j < b {
							want = sq.Coef[i-j]
						}
						if got := f.Encoder.At(i, j); got != want {
							t.Fatalf("%v: C[%d,%d] = %v, want %v", m, i, j, got, want)
						}
					}
				}
				for _, schema := range schemas {
					got, err := st.Sensitivity(schema)
					if err != nil {
						t.Fatal(err)
					}
					dense, err := sensitivity.Of(f.Encoder, schema)
					if err != nil {
						t.Fatal(err)
					}
					if mftest.RelErr(got.Value, dense.Value) > 1e-12 || !got.Exact {
						t.Fatalf("%v, n = %d, %v: sensitivity %+v, dense %+v", m, n, schema, got, dense)
					}
					loss, err := dpcore.LossAt(st, got.Value)
					if err != nil {
						t.Fatal(err)
					}
					if want := f.LossAt(got.Value); mftest.RelErr(loss, want) > 1e-12 {
						t.Fatalf("%v, n = %d, %v: loss %v, dense %v", m, n, schema, loss, want)
					}
				}
			}
		}
		// b = n is the square root.
		full, _ := BandedSqrt{Bands: n}.Build(ctx, prefix, dpcore.SingleParticipation(), BuildOptions{})
		root, _ := Sqrt{}.Build(ctx, prefix, dpcore.SingleParticipation(), BuildOptions{})
		a, _ := full.Sensitivity(dpcore.SingleParticipation())
		r, _ := root.Sensitivity(dpcore.SingleParticipation())
		la, _ := dpcore.LossAt(full, a.Value)
		lr, _ := dpcore.LossAt(root, r.Value)
		if a.Value != r.Value || mftest.RelErr(la, lr) > 1e-12 {
			t.Fatalf("bsr:%d %v %v, sqrt %v %v", n, a.Value, la, r.Value, lr)
		}
	}
	w, _ := dpcore.PrefixSum(8)
	for _, b := range []int{0, 9} {
		if _, err := (BandedSqrt{Bands: b}).Build(ctx, w, dpcore.SingleParticipation(), BuildOptions{}); err == nil {
			t.Fatalf("bsr:%d over 8 steps built", b)
		}
	}
	// Compare ranks it from its coefficients: b - 1 stored rows and the
	// output per coordinate, at n far above dpcore.DenseStepLimit.
	big, _ := dpcore.PrefixSum(50_000)
	rows, err := Compare(ctx, big, dpcore.SingleParticipation(), []Mechanism{BandedSqrt{Bands: 16}}, BuildOptions{})
	if err != nil || rows[0].Mechanism != "bsr:16" || rows[0].NoiseMemoryPerCoord != 16 || math.IsNaN(rows[0].Loss) {
		t.Fatalf("compare: %+v %v", rows, err)
	}
}
