package accountant

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// TestRandomAllocationDPAccounting holds the accountant to dp_accounting's
// own test of its random-allocation PLD (google/differential-privacy pull
// request 414 at 125d46c, python/dp_accounting/dp_accounting/pld/
// pld_privacy_accountant_test.py lines 253-267, test_random_allocation_basic):
// RandomAllocationDpEvent(GaussianDpEvent(2.0), num_selected=10,
// num_steps=100) has epsilon 2.4265 +- 1e-3 at delta 1e-6 and delta
// 1e-6 +- 1e-7 at epsilon 2.4265. dp_accounting computes 10-out-of-100
// as 10 compositions of 1-out-of-10 (random_allocation/core.py,
// _allocation_directional_pld: floor(100/10) = 10 steps, 10 epochs), which
// is the event here. On the default grid the answer is an upper bound a
// little above; at a 1e-4 grid (dp_accounting's spacing; long test) it
// meets dp_accounting's tolerances.
func TestRandomAllocationDPAccounting(t *testing.T) {
	ev := SelfComposed(RandomAllocation(10, Gaussian(2)), 10)
	const wantEps, wantDelta = 2.4265, 1e-6
	p := NewPLD(PLDOptions{AllocationInterval: 1e-3})
	eps, err := p.Epsilon(ev, wantDelta)
	if err != nil {
		t.Fatal(err)
	}
	// An upper bound: never below the reference (less its tolerance);
	// at a 1e-3 grid at most 0.04 above.
	if eps < wantEps-1e-3 || eps > wantEps+0.04 {
		t.Fatalf("epsilon %v at a 1e-3 grid, want in [%v, %v]", eps, wantEps-1e-3, wantEps+0.04)
	}
	if testing.Short() {
		return
	}
	p = NewPLD(PLDOptions{AllocationInterval: 1e-4})
	if eps, err = p.Epsilon(ev, wantDelta); err != nil || math.Abs(eps-wantEps) > 1e-3 {
		t.Fatalf("epsilon %v (%v), want %v +- 1e-3", eps, err, wantEps)
	}
	d, err := p.Delta(ev, wantEps)
	if err != nil || math.Abs(d-wantDelta) > 1e-7 {
		t.Fatalf("delta %v (%v), want %v +- 1e-7", d, err, wantDelta)
	}
}

// TestRandomAllocationMonteCarlo checks each direction's loss distribution
// against a direct simulation of its dominating pair (docs/math.md):
// remove, L = log(mean_i e^((x_i - 1/2)/s^2)) with x_1 ~ N(1, s^2) and
// the others N(0, s^2); add, -log of the same mean with every x_i ~ N(0,
// s^2). delta(eps) = E[(1 - e^(eps - L))+] from 400000 draws (fixed seed)
// must lie within 5 standard errors of the grid's, which may exceed it by
// its rounding (at most (2 log2 t + 3) grid steps of loss, here under 2%
// of delta).
func TestRandomAllocationMonteCarlo(t *testing.T) {
	const tt, sigma, draws = 6, 0.9, 200000
	c := component{sigma: sigma, q: 1, count: 1, alloc: tt}
	r := rand.New(rand.NewPCG(1, 2))
	epss := []float64{0.2, 1, 2}
	for _, dir := range []direction{remove, add} {
		d, err := discretizeAllocation(c, dir, 1e-4, 5e-4, 1e-15, 1<<22)
		if err != nil {
			t.Fatal(err)
		}
		sum, sum2 := make([]float64, len(epss)), make([]float64, len(epss))
		for range draws {
			s := 0.0
			for i := range tt {
				x := sigma * r.NormFloat64()
				if dir == remove && i == 0 {
					x++
				}
				s += math.Exp((x - 0.5) / (sigma * sigma))
			}
			l := math.Log(s / tt)
			if dir == add {
				l = -l
			}
			for k, eps := range epss {
				v := math.Max(0, -math.Expm1(eps-l))
				sum[k] += v
				sum2[k] += v * v
			}
		}
		for k, eps := range epss {
			mc := sum[k] / draws
			se := math.Sqrt((sum2[k]/draws - mc*mc) / draws)
			got := d.delta(eps)
			if got < mc-5*se || got > mc+5*se+0.02*mc {
				t.Errorf("direction %d, eps %v: grid delta %v, simulated %v +- %v", dir, eps, got, mc, se)
			}
		}
	}
}

// TestRandomAllocationAmplifies: an epoch of random allocation costs less
// than the Gaussian mechanism it runs once per example (what the run
// would claim unamplified), more as t grows; over one step it is that
// Gaussian exactly.
func TestRandomAllocationAmplifies(t *testing.T) {
	p := NewPLD(PLDOptions{AllocationInterval: 1e-3})
	const sigma, delta = 1.5, 1e-5
	gauss, err := p.Epsilon(SelfComposed(Gaussian(sigma), 5), delta)
	if err != nil {
		t.Fatal(err)
	}
	one, err := p.Epsilon(SelfComposed(RandomAllocation(1, Gaussian(sigma)), 5), delta)
	if err != nil || one != gauss {
		t.Fatalf("t = 1: %v (%v), want the Gaussian's %v", one, err, gauss)
	}
	prev := gauss
	for _, tt := range []int{2, 8, 32} {
		e, err := p.Epsilon(SelfComposed(RandomAllocation(tt, Gaussian(sigma)), 5), delta)
		if err != nil {
			t.Fatal(err)
		}
		if !(e < prev) {
			t.Fatalf("t = %d: epsilon %v, not below %v", tt, e, prev)
		}
		prev = e
	}
}

func TestRandomAllocationEvent(t *testing.T) {
	ev := Composed(SelfComposed(RandomAllocation(20, Gaussian(1.2)), 30), Gaussian(3))
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalEvent(raw)
	if err != nil {
		t.Fatal(err)
	}
	if raw2, _ := json.Marshal(back); string(raw2) != string(raw) {
		t.Fatalf("round trip: %s != %s", raw2, raw)
	}
	if _, err := NewRDP(nil).Epsilon(ev, 1e-5); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("rdp: err = %v, want ErrUnsupported", err)
	}
	for _, bad := range []Event{RandomAllocation(0, Gaussian(1)), RandomAllocation(-3, Gaussian(1)), RandomAllocation(4, Gaussian(-1))} {
		if _, err := NewPLD(PLDOptions{}).Epsilon(bad, 1e-5); !errors.Is(err, dpcore.ErrInvalid) {
			t.Fatalf("%v: err = %v, want dpcore.ErrInvalid", bad, err)
		}
	}
	if _, err := NewPLD(PLDOptions{}).Epsilon(RandomAllocation(4, PoissonSampled(0.1, Gaussian(1))), 1e-5); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("allocation of a subsampled mechanism: err = %v, want ErrUnsupported", err)
	}
}

// TestLSEConvAgrees holds lseConv (tight loops over padded prefix sums, a
// squaring computed in one order and doubled) to the straightforward
// lseConvRef: the same cells exactly for distinct operands, and to
// rounding (1e-13 of the largest cell) for a squaring, whose sums are
// grouped differently; both rounding directions, operands overlapping,
// nested and apart.
func TestLSEConvAgrees(t *testing.T) {
	for _, up := range []bool{true, false} {
		const h, tau = 1e-3, 1e-20
		o := newLSEOffsets(h, up)
		a := normalOnGrid(-0.2, 0.6, h, tau, up)
		b := normalOnGrid(0.3, 0.5, h, tau, up)
		c := normalOnGrid(9, 0.1, h, tau, up) // apart: beyond every group but the last
		d := normalOnGrid(-0.1, 0.05, h, tau, up)
		for k, pair := range [][2]logGrid{{a, b}, {b, a}, {a, c}, {c, a}, {a, d}, {d, a}, {a, a}, {c, c}} {
			got, want := lseConv(pair[0], pair[1], o, tau), lseConvRef(pair[0], pair[1], o, tau)
			if got.off != want.off || len(got.p) != len(want.p) {
				t.Fatalf("up %v, pair %d: cells %d+%d, want %d+%d", up, k, got.off, len(got.p), want.off, len(want.p))
			}
			square := &pair[0].p[0] == &pair[1].p[0]
			peak := slices.Max(want.p)
			for i := range got.p {
				if diff := math.Abs(got.p[i] - want.p[i]); diff > 0 && (!square || diff > 1e-13*peak) {
					t.Fatalf("up %v, pair %d, cell %d: %v, want %v", up, k, i, got.p[i], want.p[i])
				}
			}
			if diff := math.Abs(got.inf - want.inf); diff > 0 && (!square || diff > 1e-13*peak) {
				t.Fatalf("up %v, pair %d: inf %v, want %v", up, k, got.inf, want.inf)
			}
		}
	}
}
