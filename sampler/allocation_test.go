package sampler

import (
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/dpmf-go/dpmf/dpcore"
)

// TestRandomAllocation: every example joins exactly one step of each full
// epoch, a partial last epoch at most one; batch sizes are Binomial(m, 1/t)
// (chi-square, p > 1e-3 at a fixed seed); the schema contains what
// happened, and the accounting names the allocation.
func TestRandomAllocation(t *testing.T) {
	const m, B, n = 200, 20, 10*300 + 4 // t = 10, 300 full epochs and 4 steps
	s, err := NewRandomAllocation(m, B, n, seed(3))
	if err != nil {
		t.Fatal(err)
	}
	const tt = m / B
	batches := run(t, s)
	var sizes []int
	for e := 0; e*tt < n; e++ {
		count := make([]int, m)
		for _, b := range batches[e*tt : min(n, (e+1)*tt)] {
			sizes = append(sizes, len(b))
			for _, x := range b {
				count[x]++
			}
		}
		for x, c := range count {
			if c > 1 || (c == 0 && (e+1)*tt <= n) {
				t.Fatalf("epoch %d: example %d joined %d steps", e, x, c)
			}
		}
	}
	if pv := chiSquareBinomial(t, sizes, m, 1.0/tt); pv < 1e-3 {
		t.Fatalf("batch sizes are not Binomial(%d, 1/%d): p = %g", m, tt, pv)
	}
	sc := s.Schema()
	if sc != (dpcore.Schema{Kind: dpcore.MinSep, K: 301, B: 1}) {
		t.Fatalf("schema %v", sc)
	}
	checkSchema(t, sc, n, participations(m, batches))
	a := s.Accounting()
	if a.Kind != AccountingRandomAllocation || a.Compositions != 301 || a.AllocationSize != tt {
		t.Fatalf("accounting %+v", a)
	}
	if s.ExpectedBatch() != float64(m)/tt {
		t.Fatalf("expected batch %g", s.ExpectedBatch())
	}
}

// TestRandomAllocationIndependent: the steps of two examples in one epoch
// are independent and uniform: the t^2 pairs of (step of example 0, step
// of example 1) over 4000 epochs pass a chi-square test (p > 1e-3). A
// shuffle into equal batches fails it (the two examples share a step with
// probability (B-1)/(m-1), not 1/t), which shows the test can fail.
func TestRandomAllocationIndependent(t *testing.T) {
	const m, B, epochs = 12, 3, 4000
	const tt = m / B
	pairs := func(s Sampler) float64 {
		var obs [tt * tt]float64
		at := [2]int{}
		for e := 0; e < epochs; e++ {
			for k := 0; k < tt; k++ {
				b, err := s.Next(nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, x := range b {
					if x < 2 {
						at[x] = k
					}
				}
			}
			obs[at[0]*tt+at[1]]++
		}
		stat := 0.0
		want := float64(epochs) / (tt * tt)
		for _, o := range obs {
			stat += (o - want) * (o - want) / want
		}
		return distuv.ChiSquared{K: tt*tt - 1}.Survival(stat)
	}
	s, err := NewRandomAllocation(m, B, epochs*tt, seed(4))
	if err != nil {
		t.Fatal(err)
	}
	if pv := pairs(s); pv < 1e-3 {
		t.Fatalf("allocation of two examples not independent and uniform: p = %g", pv)
	}
	sh, err := NewShuffle(m, B, epochs*tt, seed(4))
	if err != nil {
		t.Fatal(err)
	}
	if pv := pairs(sh); pv > 1e-3 {
		t.Fatalf("shuffling passed as random allocation: p = %g", pv)
	}
}

// TestBandAllocation: an example joins only the steps of its partition
// (a multiple of b apart), exactly one in each full band epoch of t of
// them; batch sizes are Binomial(floor(m/b), 1/t); the schema contains
// what happened.
func TestBandAllocation(t *testing.T) {
	const m, B, bands = 403, 20, 4 // partitions of 100, t = 5
	const tt = 5
	const n = bands*tt*60 + 7
	s, err := NewBandAllocation(m, B, bands, n, seed(5))
	if err != nil {
		t.Fatal(err)
	}
	batches := run(t, s)
	parts := participations(m, batches)
	checkSchema(t, s.Schema(), n, parts)
	if sc := s.Schema(); sc != (dpcore.Schema{Kind: dpcore.MinSep, K: 61, B: bands}) {
		t.Fatalf("schema %v", sc)
	}
	used := 0
	for x, p := range parts {
		if len(p) == 0 {
			continue
		}
		used++
		j := p[0] % bands
		count := map[int]int{}
		for _, st := range p {
			if st%bands != j {
				t.Fatalf("example %d joined steps %v of two partitions", x, p)
			}
			count[st/bands/tt]++
		}
		for e := 0; e < 60; e++ { // full band epochs
			if count[e] != 1 {
				t.Fatalf("example %d joined %d steps of band epoch %d", x, count[e], e)
			}
		}
	}
	if used != bands*(m/bands) {
		t.Fatalf("%d examples used, want %d", used, bands*(m/bands))
	}
	var sizes []int
	for _, b := range batches[:bands*tt*60] {
		sizes = append(sizes, len(b))
	}
	if pv := chiSquareBinomial(t, sizes, m/bands, 1.0/tt); pv < 1e-3 {
		t.Fatalf("batch sizes are not Binomial(%d, 1/%d): p = %g", m/bands, tt, pv)
	}
	a := s.Accounting()
	if a.Kind != AccountingRandomAllocation || a.AllocationSize != tt || a.Compositions != 61 || a.Bands != bands {
		t.Fatalf("accounting %+v", a)
	}
	if s.ExpectedBatch() != float64(m/bands)/tt {
		t.Fatalf("expected batch %v", s.ExpectedBatch())
	}
}
