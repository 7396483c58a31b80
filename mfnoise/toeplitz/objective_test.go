package toeplitz

import (
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"
)

// TestToeplitzObjectiveGradients: the objectives of both optimizers have
// the gradients central differences give, and the banded objective is the
// reported sensitivity times the weighted error.
func TestObjectiveGradients(t *testing.T) {
	n := 40
	prefix, _ := dpcore.PrefixSum(n)
	mom, _ := dpcore.MomentumWorkload(n, 0.8, dpcore.ConstantSchedule(1))
	for _, w := range []dpcore.Workload{prefix, mom} {
		for _, obj := range []Objective{TotalLoss, MaxError} {
			tw, err := newToeplitzWorkload("test", w, obj)
			if err != nil {
				t.Fatal(err)
			}
			for _, kb := range [][2]int{{1, n}, {4, 10}, {3, 7}, {10, 4}} {
				for _, minsep := range []bool{false, true} {
					eval := toeplitzEval(tw, 6, kb[0], kb[1], minsep)
					x := []float64{0.4, 0.3, -0.1, 0.2, 0.05}
					g := make([]float64, len(x))
					eval(x, g)
					mftest.CheckCentralDifferences(func(x []float64) float64 { return eval(x, nil) }, x, g, nil, 1e-5, func(i int, fd float64) {
						t.Errorf("toeplitz %s obj %d kb %v minsep %v: d/dx_%d = %v, central difference %v", w, obj, kb, minsep, i, g[i], fd)
					})
					// The objective's sensitivity is the one reported.
					m, _ := New("x", n, append([]float64{1}, x...))
					schema := dpcore.Schema{Kind: dpcore.KB, K: kb[0], B: kb[1]}
					if minsep {
						schema.Kind = dpcore.MinSep
					}
					if kb[0] == 1 {
						schema = dpcore.SingleParticipation()
					}
					if schema.Validate(n) != nil {
						continue // (k,b) with k b < n
					}
					sens, err := m.Sensitivity(schema)
					if err != nil {
						t.Fatal(err)
					}
					rows, _ := m.DecoderRowNorms(w)
					want := 0.0
					for i, r := range rows {
						want += tw.weight[i] * r
						if i > 0 {
							want -= tw.weight[i] * rows[i-1]
						}
					}
					if got := eval(x, nil); mftest.RelErr(got, sens.Value*sens.Value*want) > 1e-9 {
						t.Errorf("toeplitz %s %s: objective %v, reported sens^2 x error %v", w, schema, got, sens.Value*sens.Value*want)
					}
				}
				for _, unb := range []bool{false, true} {
					eval := bltEval(tw, 3, kb[0], kb[1], unb)
					x := []float64{1, 3, -0.5, -1, 0.2, 0.5}
					g := make([]float64, len(x))
					eval(x, g)
					mftest.CheckCentralDifferences(func(x []float64) float64 { return eval(x, nil) }, x, g, nil, 1e-5, func(i int, fd float64) {
						t.Errorf("blt %s obj %d kb %v unbounded %v: d/dx_%d = %v, central difference %v", w, obj, kb, unb, i, g[i], fd)
					})
				}
			}
		}
	}
}
