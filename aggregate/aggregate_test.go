package aggregate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/privacy"
	"gonum.org/v1/gonum/mat"
)

var testSeed = func() *dpcore.Seed {
	var s dpcore.Seed
	for i := range s {
		s[i] = byte(7*i + 3)
	}
	return &s
}()

type setup struct {
	mech     string
	workload Workload
	n, d     int
	k, b     int
	count    bool
	seed     *dpcore.Seed
	float    bool // the float path (before the exact arithmetic)
}

func (s setup) config(t testing.TB) Config {
	t.Helper()
	spec, err := privacy.ParseMechanism(s.mech)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.workload.MechanismWorkload(s.n)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := privacy.Participation{K: s.k, B: s.b}.Schema()
	if err != nil {
		t.Fatal(err)
	}
	m, err := BuildMechanism(context.Background(), spec, w, schema)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Dim: s.d, Workload: s.workload, Mechanism: m, Epsilon: 2, Delta: 1e-6, Clip: 1.5, K: s.k, B: s.b, Count: s.count, Seed: s.seed, floatNoise: s.float}
}

func open(t testing.TB, path string, cfg Config) *Aggregator {
	t.Helper()
	a, err := Open(context.Background(), path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// targetMatrix is the dense n x n map T from the noisy per-step sums y to
// the releases: release_t = sum_i T[t,i] y_i (the reference, independent of
// the aggregator's recurrences).
func targetMatrix(w Workload, n int) *mat.Dense {
	m := mat.NewDense(n, n, nil)
	for t := 0; t < n; t++ {
		for i := 0; i <= t; i++ {
			switch w.Kind {
			case PrefixSum:
				m.Set(t, i, 1)
			case Momentum:
				m.Set(t, i, math.Pow(w.Beta, float64(t-i)))
			case Window:
				if t-i < w.Window {
					m.Set(t, i, 1)
				}
			}
		}
	}
	return m
}

// noiseCovariance is T A^-1 B B^T A^-T T^T: the covariance across steps of
// one coordinate of release - true sum, per unit noise std.
func noiseCovariance(t *testing.T, m NamedStrategy, w Workload) *mat.SymDense {
	a, err := m.Workload().Matrix()
	if err != nil {
		t.Fatal(err)
	}
	n := m.Strategy().Steps()
	_, dec, err := m.Strategy().Matrices()
	if err != nil {
		t.Fatal(err)
	}
	var g mat.Dense // A^-1 B: the noise W = G Z
	if err := g.Solve(a, dec); err != nil {
		t.Fatal(err)
	}
	var tg mat.Dense
	tg.Mul(targetMatrix(w, n), &g)
	cov := mat.NewSymDense(n, nil)
	cov.SymOuterK(1, &tg)
	return cov
}

// TestReleaseCovariance checks that release - true sum has the covariance
// the mechanism promises (exact arithmetic, and the float path for the
// non-causal tree-full), noise_std^2 T A^-1 B B^T A^-T T^T (for the prefix
// sum T A^-1 = I: noise_std^2 B B^T), estimated over d = 4000 independent
// coordinates with a fixed seed. Tolerance: 6 standard errors of a sample
// covariance, sqrt((S_ii S_jj + S_ij^2) / d), per entry.
func TestReleaseCovariance(t *testing.T) {
	const n, d = 16, 4000
	for _, c := range []setup{
		{mech: "dpsgd", workload: Workload{Kind: PrefixSum}, k: 2, b: 8},
		{mech: "tree-online", workload: Workload{Kind: PrefixSum}, k: 2, b: 8},
		{mech: "tree-full", workload: Workload{Kind: Window, Window: 5}, k: 1, b: 1, float: true},
		{mech: "bandmf:4", workload: Workload{Kind: Momentum, Beta: 0.8}, k: 2, b: 8},
		{mech: "tree-online", workload: Workload{Kind: Momentum, Beta: 0.5}, k: 1, b: 1, count: true},
		{mech: "blt:2", workload: Workload{Kind: PrefixSum}, k: 1, b: 1},
		{mech: "mf-single", workload: Workload{Kind: Window, Window: 3}, k: 1, b: 1},
	} {
		t.Run(c.mech+"/"+c.workload.String(), func(t *testing.T) {
			c.n, c.d, c.seed = n, d, testSeed
			cfg := c.config(t)
			a := open(t, filepath.Join(t.TempDir(), "s.db"), cfg)
			defer a.Close()
			ctx := context.Background()
			// Known contributions: contributor i joins step i+1 with
			// value (i+1) in coordinate i, so the true sums are exact.
			y := mat.NewDense(n, d, nil)
			for s := 0; s < n; s++ {
				y.Set(s, s, 1)
			}
			var truth mat.Dense
			truth.Mul(targetMatrix(c.workload, n), y)
			diff := mat.NewDense(n, d, nil)
			for s := 1; s <= n; s++ {
				if _, err := a.Add(ctx, fmt.Sprint("c", s), y.RawRowView(s-1)); err != nil {
					t.Fatal(err)
				}
				r, err := a.Commit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for j := range d {
					diff.Set(s-1, j, r.Sum[j]-truth.At(s-1, j))
				}
			}
			std := a.Ledger().NoiseStd
			want := noiseCovariance(t, cfg.Mechanism, c.workload)
			want.ScaleSym(std*std, want)
			worst := 0.0
			for i := range n {
				mean := mat.Sum(diff.RowView(i)) / d
				if se := math.Sqrt(want.At(i, i) / d); math.Abs(mean) > 6*se {
					t.Errorf("step %d: mean error %.4g, want 0 +- %.3g", i+1, mean, 6*se)
				}
				for j := 0; j <= i; j++ {
					emp := mat.Dot(diff.RowView(i), diff.RowView(j)) / d
					w := want.At(i, j)
					se := math.Sqrt((want.At(i, i)*want.At(j, j) + w*w) / d)
					if z := math.Abs(emp-w) / se; z > 6 {
						t.Errorf("cov[%d,%d] = %.5g, want %.5g (%.1f standard errors)", i+1, j+1, emp, w, z)
					} else {
						worst = max(worst, z)
					}
				}
			}
			t.Logf("noise std %.4g; worst covariance entry %.2f standard errors", std, worst)
		})
	}
}

// TestReleaseExact checks the float path (kept for the attack test and
// benchmarks): it reconstructs the noise from the seed with mfnoise
// directly and checks every release against the dense reference
// T (X + s W) to rounding: the aggregator adds exactly one noise row per
// step, in order, at the ledger's scale, and the count is exact.
func TestReleaseExact(t *testing.T) {
	const n, d = 12, 7
	for _, c := range []setup{
		{mech: "tree-online", workload: Workload{Kind: PrefixSum}, k: 3, b: 2, count: true},
		{mech: "bandmf:3", workload: Workload{Kind: Window, Window: 4}, k: 3, b: 2},
		{mech: "dpsgd", workload: Workload{Kind: Momentum, Beta: 0.9}, k: 3, b: 2, count: true},
	} {
		t.Run(c.mech+"/"+c.workload.String(), func(t *testing.T) {
			c.n, c.d, c.seed, c.float = n, d, testSeed, true
			cfg := c.config(t)
			a := open(t, filepath.Join(t.TempDir(), "s.db"), cfg)
			defer a.Close()
			ctx := context.Background()
			dim := d
			if c.count {
				dim++
			}
			x := mat.NewDense(n, dim, nil)
			contrib := make([][][]float64, n)
			for s := 0; s < n; s++ {
				for j := 0; j < 5; j++ {
					v := make([]float64, d)
					for i := range v {
						v[i] = float64((s*j+i)%5) * 0.2
					}
					v[(s+j)%d] = 3 // norm > 1.5: clipped
					contrib[s] = append(contrib[s], v)
					nv := norm2(v)
					for i, vi := range v {
						x.Set(s, i, x.At(s, i)+vi*cfg.Clip/nv)
					}
					if c.count {
						x.Set(s, d, x.At(s, d)+cfg.Clip)
					}
				}
			}
			src, err := noise.New(cfg.Mechanism.Strategy(), dim, noise.Options{Seed: testSeed})
			if err != nil {
				t.Fatal(err)
			}
			std := a.Ledger().NoiseStd
			w := make([]float32, dim)
			for s := 0; s < n; s++ {
				if err := src.Next(w); err != nil {
					t.Fatal(err)
				}
				for i := range dim {
					x.Set(s, i, x.At(s, i)+std*float64(w[i]))
				}
			}
			var want mat.Dense
			want.Mul(targetMatrix(c.workload, n), x)
			for s := 1; s <= n; s++ {
				for j, v := range contrib[s-1] {
					if _, err := a.Add(ctx, fmt.Sprintf("s%d-%d", s, j), v); err != nil {
						t.Fatal(err)
					}
				}
				r, err := a.Commit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for i := range d {
					if g, w := r.Sum[i], want.At(s-1, i); math.Abs(g-w) > 1e-9*(1+math.Abs(w)) {
						t.Fatalf("release %d[%d] = %.12g, want %.12g", s, i, g, w)
					}
				}
				if c.count {
					if g, w := r.Count, want.At(s-1, d)/cfg.Clip; math.Abs(g-w) > 1e-9*(1+math.Abs(w)) {
						t.Fatalf("release %d count = %.12g, want %.12g", s, g, w)
					}
				}
				stored, err := a.Release(s)
				if err != nil {
					t.Fatal(err)
				}
				for i := range d {
					if stored.Sum[i] != r.Sum[i] {
						t.Fatalf("stored release %d differs from the returned one", s)
					}
				}
			}
			if l := a.Ledger(); l.ContributionsClipped != uint64(5*n) || l.ContributionsAccepted != uint64(5*n) {
				t.Errorf("ledger counts %d accepted, %d clipped; want %d each", l.ContributionsAccepted, l.ContributionsClipped, 5*n)
			}
		})
	}
}

// TestBounding checks each contributor rule: clipping to zeta, at most k
// participations, at least b steps apart, typed and counted rejections that
// change no sum. The accepted contributions' sum is read back exactly by
// subtracting the reconstructed noise.
func TestBounding(t *testing.T) {
	const n, d, k, b = 12, 3, 2, 3
	c := setup{mech: "tree-online", workload: Workload{Kind: PrefixSum}, n: n, d: d, k: k, b: b, count: true, seed: testSeed}
	cfg := c.config(t)
	path := filepath.Join(t.TempDir(), "s.db")
	a := open(t, path, cfg)
	defer a.Close()
	ctx := context.Background()
	seeded, err := a.SeededNoise(n)
	if err != nil {
		t.Fatal(err)
	}
	var prefixNoise []float64
	// The exact arithmetic rounds each record coordinate to the grid:
	// at most half a grid unit each, for at most 3 records a step.
	tol := 3 * 0.5 * a.Ledger().Grid
	// commit checks that the step's true sum is want (count wantN).
	var prev []float64
	var prevN float64
	commit := func(want []float64, wantN float64) {
		t.Helper()
		r, err := a.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		prefixNoise = seeded[r.Step-1]
		got := make([]float64, d)
		for i := range d {
			got[i] = r.Sum[i] - prefixNoise[i]
			if prev != nil {
				got[i] -= prev[i]
			}
		}
		gotN := (r.Count - prefixNoise[d]/cfg.Clip) - prevN
		for i := range d {
			if math.Abs(got[i]-want[i]) > 2*tol {
				t.Fatalf("step %d: true sum %v, want %v", r.Step, got, want)
			}
		}
		if math.Abs(gotN-wantN) > 1e-9 {
			t.Fatalf("step %d: true count %v, want %v", r.Step, gotN, wantN)
		}
		prev = make([]float64, d)
		for i := range d {
			prev[i] = r.Sum[i] - prefixNoise[i]
		}
		prevN = r.Count - prefixNoise[d]/cfg.Clip
	}
	add := func(id string, v []float64, reason error) {
		t.Helper()
		_, err := a.Add(ctx, id, v)
		if reason == nil {
			if err != nil {
				t.Fatalf("Add(%s): %v", id, err)
			}
			return
		}
		var re *RejectError
		if !errors.Is(err, ErrRejected) || !errors.Is(err, reason) || !errors.As(err, &re) {
			t.Fatalf("Add(%s) = %v, want a rejection for %v", id, err, reason)
		}
	}
	// Step 1: clipping (norm 5 -> 1.5), same-step repeat, bad input.
	add("alice", []float64{3, 4, 0}, nil)
	add("alice", []float64{1, 0, 0}, ErrSeparation)
	add("bob", []float64{1, 0}, ErrDimension)
	add("bob", []float64{math.NaN(), 0, 0}, ErrNotFinite)
	add("bob", []float64{math.Inf(1), 0, 0}, ErrNotFinite)
	add("", []float64{0, 0, 0}, ErrContributor)
	add("huge", []float64{1e300, 1e300, 0}, nil) // norm overflows float64: still clipped
	h := 1.5 / math.Sqrt2
	commit([]float64{0.9 + h, 1.2 + h, 0}, 2)
	// Steps 2, 3: alice is within b = 3 of step 1.
	add("alice", []float64{0, 1, 0}, ErrSeparation)
	commit([]float64{0, 0, 0}, 0)
	add("alice", []float64{0, 1, 0}, ErrSeparation)
	commit([]float64{0, 0, 0}, 0)
	// Step 4: allowed again (4 - 1 = b); her second and last participation.
	add("alice", []float64{0, 1, 0}, nil)
	commit([]float64{0, 1, 0}, 1)
	for range b {
		commit([]float64{0, 0, 0}, 0)
	}
	// Step 8: k = 2 reached.
	add("alice", []float64{0, 0, 1}, ErrParticipationLimit)
	add("carol", []float64{0, 0, 1}, nil)    // norm 1 < 1.5: unchanged
	add("dave", []float64{1.2, 1.6, 0}, nil) // norm 2 in (zeta, 2 zeta): clipped to 1.5
	commit([]float64{0.9, 1.2, 1}, 2)
	l := a.Ledger()
	if l.ContributionsAccepted != 5 || l.ContributionsRejected != 8 || l.ContributionsClipped != 3 {
		t.Errorf("ledger: accepted %d rejected %d clipped %d, want 5, 8, 3", l.ContributionsAccepted, l.ContributionsRejected, l.ContributionsClipped)
	}
	// The participation record survives a reopen.
	a.Close()
	a = open(t, path, cfg)
	defer a.Close()
	add("alice", []float64{0, 0, 1}, ErrParticipationLimit)
	add("carol", []float64{0, 0, 1}, ErrSeparation)
	if l := a.Ledger(); l.ContributionsRejected != 10 {
		t.Errorf("after reopen: %d rejected, want 10", l.ContributionsRejected)
	}
}

// TestBudget checks the ledger: epsilon spent is the planner's for the
// same settings at every step (privacy.TestReleasePlanEpsilonSpent checks
// it against the closed form of DP-SGD under (2,4)-min-separation), grows,
// reaches the budget at the horizon, and the release after it is refused
// with nothing changed.
func TestBudget(t *testing.T) {
	const n = 16
	c := setup{mech: "dpsgd", workload: Workload{Kind: PrefixSum}, n: n, d: 2, k: 2, b: 4}
	cfg := c.config(t)
	a := open(t, filepath.Join(t.TempDir(), "s.db"), cfg)
	defer a.Close()
	ctx := context.Background()
	plan := samePlan(t, cfg)
	if l := a.Ledger(); l.EpsilonSpent != 0 || l.Steps != 0 || !l.Covered {
		t.Fatalf("fresh ledger %+v", l)
	}
	prev := 0.0
	for s := 1; s <= n; s++ {
		if _, err := a.Add(ctx, fmt.Sprint("x", s), []float64{1, 0}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		l := a.Ledger()
		want, err := plan.EpsilonSpent(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if l.EpsilonSpent != want || l.EpsilonSpent < prev || l.Steps != s {
			t.Fatalf("step %d: spent %v (prev %v), want %v", s, l.EpsilonSpent, prev, want)
		}
		prev = l.EpsilonSpent
	}
	if l := a.Ledger(); math.Abs(l.EpsilonSpent-cfg.Epsilon) > 1e-6 || l.EpsilonRemaining > 1e-6 {
		t.Fatalf("at the horizon: spent %v of %v", l.EpsilonSpent, l.EpsilonBudget)
	}
	before := a.Ledger()
	if _, err := a.Commit(ctx); !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("release %d past the horizon: %v, want ErrBudgetExhausted", n+1, err)
	}
	if _, err := a.Add(ctx, "late", []float64{1, 0}); !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("contribution past the horizon: %v, want ErrBudgetExhausted", err)
	}
	after := a.Ledger()
	if after.Steps != before.Steps || after.EpsilonSpent != before.EpsilonSpent {
		t.Fatalf("refused release changed the ledger: %+v -> %+v", before, after)
	}
	if _, err := a.Release(n + 1); !errors.Is(err, ErrNotReleased) {
		t.Fatalf("Release(%d) = %v", n+1, err)
	}
}

// TestReopen checks that closing and reopening mid-stream continues the
// same noise stream (releases bitwise equal to an uninterrupted run), and
// that a different configuration is refused.
func TestReopen(t *testing.T) {
	const n = 8
	// The exact arithmetic keeps step sums and encoded rows across steps
	// (all of them for a dense encoder, a band's worth for bandmf): a
	// reopen at any step must continue bitwise.
	ctx := context.Background()
	for _, c := range []setup{
		{mech: "mf-single", workload: Workload{Kind: PrefixSum}, k: 1, b: 1},
		{mech: "bandmf:3", workload: Workload{Kind: Momentum, Beta: 0.7}, k: 2, b: 3},
		{mech: "blt:2", workload: Workload{Kind: Window, Window: 2}, k: 1, b: 1},
	} {
		c.n, c.d, c.seed = n, 3, testSeed
		cfg := c.config(t)
		var want [][]float64
		for _, reopenAt := range []int{1, 2, 4, 7} {
			path := filepath.Join(t.TempDir(), "r.db")
			a := open(t, path, cfg)
			for s := 1; s <= n; s++ {
				if s == reopenAt {
					a.Close()
					a = open(t, path, cfg)
				}
				for j := range 3 {
					if _, err := a.Add(ctx, fmt.Sprint("p", s, j), []float64{float64(j), 0.5, float64(s) / 10}); err != nil {
						t.Fatal(err)
					}
				}
				r, err := a.Commit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if reopenAt == 1 {
					want = append(want, r.Sum)
				} else if !slices.Equal(r.Sum, want[s-1]) {
					t.Fatalf("%s: release %d after a reopen at step %d: %v, without: %v", c.mech, s, reopenAt, r.Sum, want[s-1])
				}
			}
			a.Close()
		}
	}
	// A store made by the float path is refused by the exact arithmetic.
	fc := setup{mech: "dpsgd", workload: Workload{Kind: PrefixSum}, n: 4, d: 2, k: 1, b: 1, seed: testSeed, float: true}
	fcfg := fc.config(t)
	fpath := filepath.Join(t.TempDir(), "float.db")
	open(t, fpath, fcfg).Close()
	fcfg.floatNoise = false
	if _, err := Open(ctx, fpath, fcfg); !errors.Is(err, ErrStoreMismatch) || !strings.Contains(err.Error(), "arithmetic") {
		t.Fatalf("float-path store opened with the exact arithmetic: %v, want ErrStoreMismatch naming the arithmetic", err)
	}
}

func TestReopenStoresMechanism(t *testing.T) {
	const n = 8
	c := setup{mech: "tree-online", workload: Workload{Kind: Window, Window: 3}, n: n, d: 5, k: 2, b: 2, seed: testSeed}
	cfg := c.config(t)
	ctx := context.Background()
	run := func(path string, reopenAt int) [][]float64 {
		a := open(t, path, cfg)
		var out [][]float64
		for s := 1; s <= n; s++ {
			if s == reopenAt {
				a.Close()
				a = open(t, path, cfg)
			}
			if _, err := a.Add(ctx, fmt.Sprint("p", s%3), []float64{1, 2, 3, 4, float64(s)}); err != nil && !errors.Is(err, ErrRejected) {
				t.Fatal(err)
			}
			r, err := a.Commit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r.Sum)
		}
		a.Close()
		return out
	}
	dir := t.TempDir()
	want := run(filepath.Join(dir, "a.db"), -1)
	got := run(filepath.Join(dir, "b.db"), 5)
	for s := range want {
		for i := range want[s] {
			if want[s][i] != got[s][i] {
				t.Fatalf("release %d differs after reopen: %v vs %v", s+1, got[s], want[s])
			}
		}
	}
	// The store keeps the mechanism: the stored one is bitwise the same.
	stored, err := StoredMechanism(filepath.Join(dir, "a.db"), cfg.Mechanism.Schema())
	if err != nil || stored == nil {
		t.Fatalf("StoredMechanism: %v, %v", stored, err)
	}
	origC, origB, _ := cfg.Mechanism.Strategy().Matrices()
	gotC, gotB, err := stored.Strategy().Matrices()
	if err != nil || stored.Name() != cfg.Mechanism.Name() || !mat.Equal(gotC, origC) || !mat.Equal(gotB, origB) || stored.Workload().String() != cfg.Mechanism.Workload().String() {
		t.Fatalf("stored mechanism %s differs from %s", stored.Name(), cfg.Mechanism.Name())
	}
	if m, err := StoredMechanism(filepath.Join(dir, "none.db"), cfg.Mechanism.Schema()); m != nil || err != nil {
		t.Fatalf("StoredMechanism of no store: %v, %v", m, err)
	}
	other := cfg
	other.Clip = 2
	if _, err := Open(ctx, filepath.Join(dir, "a.db"), other); !errors.Is(err, ErrStoreMismatch) {
		t.Fatalf("reopen with another clip norm: %v, want ErrStoreMismatch", err)
	}
}

// TestConcurrentAdd adds from many goroutines at once: every accepted
// contribution is counted exactly once, in batches.
func TestConcurrentAdd(t *testing.T) {
	const workers, per = 16, 50
	c := setup{mech: "dpsgd", workload: Workload{Kind: PrefixSum}, n: 4, d: 2, k: 2, b: 2, count: true, seed: testSeed}
	cfg := c.config(t)
	a := open(t, filepath.Join(t.TempDir(), "s.db"), cfg)
	defer a.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range per {
				if _, err := a.Add(ctx, fmt.Sprintf("g%d-%d", g, i), []float64{1, 0}); err != nil {
					t.Error(err)
				}
				// A repeat in the same step is always refused.
				if _, err := a.Add(ctx, fmt.Sprintf("g%d-%d", g, i), []float64{1, 0}); !errors.Is(err, ErrSeparation) {
					t.Errorf("repeat: %v", err)
				}
			}
		})
	}
	wg.Wait()
	r, err := a.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seeded, err := a.SeededNoise(1)
	if err != nil {
		t.Fatal(err)
	}
	// 1 is 2^20/1.5 grid units: rounded by at most half a unit each.
	if got := r.Sum[0] - seeded[0][0]; math.Abs(got-workers*per) > workers*per*a.Ledger().Grid {
		t.Errorf("sum %v, want %d", got, workers*per)
	}
	if got := r.Count - seeded[0][2]/cfg.Clip; math.Abs(got-workers*per) > 1e-6 {
		t.Errorf("count %v, want %d", got, workers*per)
	}
}

func TestConfigErrors(t *testing.T) {
	c := setup{mech: "dpsgd", workload: Workload{Kind: PrefixSum}, n: 4, d: 2, k: 2, b: 2}
	good := c.config(t)
	for name, mod := range map[string]func(*Config){
		"dim":      func(c *Config) { c.Dim = 0 },
		"eps":      func(c *Config) { c.Epsilon = math.NaN() },
		"delta":    func(c *Config) { c.Delta = 1 },
		"clip":     func(c *Config) { c.Clip = -1 },
		"schema":   func(c *Config) { c.K = 3 },
		"workload": func(c *Config) { c.Workload = Workload{Kind: Momentum, Beta: 0.5} },
		"nil":      func(c *Config) { c.Mechanism = nil },
	} {
		cfg := good
		mod(&cfg)
		if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), cfg); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: %v, want dpcore.ErrInvalid", name, err)
		}
	}
	for _, s := range []string{"", "prefix:1", "momentum:1", "momentum", "window:0", "window:x", "sum"} {
		if _, err := ParseWorkload(s); err == nil {
			t.Errorf("ParseWorkload(%q) accepted", s)
		}
	}
}

// TestSizeRefusals checks that sizes that cannot fit are refused with the
// memory they would need, before anything is allocated.
func TestSizeRefusals(t *testing.T) {
	spec, _ := privacy.ParseMechanism("tree-online")
	w, _ := dpcore.PrefixSum(20000)
	if _, err := BuildMechanism(context.Background(), spec, w, dpcore.SingleParticipation()); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "GiB") {
		t.Errorf("horizon 20000: %v, want a refusal naming the GiB needed", err)
	}
	cfg := setup{mech: "bandmf:4", workload: Workload{Kind: PrefixSum}, n: 8, d: 1000, k: 1, b: 1}.config(t)
	cfg.NoiseMemory = 1000
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "m.db"), cfg)
	if err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("noise memory 1000 bytes at d = 1000: %v, want a refusal naming the bytes needed", err)
	}
}

// TestExactReleaseDecodes checks the exact arithmetic against a dense
// reference: every release equals T X + the seed's noise (SeededNoise),
// with X the clipped contributions in float64, to the grid's rounding
// (half a grid unit per record coordinate, summed over the records the
// workload adds up), and the count exactly.
func TestExactReleaseDecodes(t *testing.T) {
	const n, d, per = 12, 7, 5
	for _, c := range []setup{
		{mech: "tree-online", workload: Workload{Kind: PrefixSum}, k: 3, b: 2, count: true},
		{mech: "bandmf:3", workload: Workload{Kind: Window, Window: 4}, k: 3, b: 2},
		{mech: "dpsgd", workload: Workload{Kind: Momentum, Beta: 0.9}, k: 3, b: 2, count: true},
		{mech: "blt:2", workload: Workload{Kind: PrefixSum}, k: 1, b: 1},
		{mech: "mf-single", workload: Workload{Kind: Momentum, Beta: 0.5}, k: 1, b: 1, count: true},
	} {
		t.Run(c.mech+"/"+c.workload.String(), func(t *testing.T) {
			c.n, c.d, c.seed = n, d, testSeed
			cfg := c.config(t)
			a := open(t, filepath.Join(t.TempDir(), "s.db"), cfg)
			defer a.Close()
			ctx := context.Background()
			// x: the clipped contributions in float64, count last.
			x := mat.NewDense(n, d+1, nil)
			for s := 1; s <= n; s++ {
				for j := range per {
					v := make([]float64, d)
					for i := range v {
						v[i] = float64((s*j+i)%5) * 0.2
					}
					v[(s+j)%d] = 3 // norm > 1.5: clipped
					nv := norm2(v)
					for i, vi := range v {
						x.Set(s-1, i, x.At(s-1, i)+vi*cfg.Clip/nv)
					}
					x.Set(s-1, d, x.At(s-1, d)+1)
				}
			}
			var truth mat.Dense
			truth.Mul(targetMatrix(c.workload, n), x)
			rows := mat.NewDense(n, d+1, nil)
			for s := 1; s <= n; s++ {
				for j := range per {
					v := make([]float64, d)
					for i := range v {
						v[i] = float64((s*j+i)%5) * 0.2
					}
					v[(s+j)%d] = 3
					if _, err := a.Add(ctx, fmt.Sprintf("s%d-%d", s, j), v); err != nil {
						t.Fatal(err)
					}
				}
				r, err := a.Commit(ctx)
				if err != nil {
					t.Fatal(err)
				}
				copy(rows.RawRowView(s-1), r.Sum)
				rows.Set(s-1, d, r.Count)
			}
			noise, err := a.SeededNoise(n)
			if err != nil {
				t.Fatal(err)
			}
			grid := a.Ledger().Grid
			for s := range n {
				tsum := 0.0
				for i := 0; i <= s; i++ {
					tsum += math.Abs(targetMatrix(c.workload, n).At(s, i))
				}
				tol := tsum*per*0.5*grid + 1e-9
				for i := range d {
					w := truth.At(s, i) + noise[s][i]
					if g := rows.At(s, i); math.Abs(g-w) > tol+1e-9*math.Abs(w) {
						t.Fatalf("release %d[%d] = %.12g, want %.12g +- %.3g", s+1, i, g, w, tol)
					}
				}
				if c.count {
					w := truth.At(s, d) + noise[s][d]/cfg.Clip
					if g := rows.At(s, d); math.Abs(g-w) > 1e-9*(1+math.Abs(w)) {
						t.Fatalf("release %d count = %.12g, want %.12g", s+1, g, w)
					}
				}
			}
		})
	}
}

// samePlan is the planner's plan for cfg, made apart from any aggregator:
// the lattice of the exact arithmetic (a property of the mechanism and
// the clip norm), and the request a caller would make.
func samePlan(t *testing.T, cfg Config) *privacy.ReleasePlan {
	t.Helper()
	req := privacy.ReleaseRequest{Mechanism: cfg.Mechanism.Name(), Strategy: cfg.Mechanism.Strategy(),
		Participation: privacy.Participation{K: cfg.K, B: cfg.B}, Epsilon: cfg.Epsilon, Delta: cfg.Delta, Seeded: cfg.Seed != nil}
	if !cfg.floatNoise {
		norm := cfg.Clip
		if cfg.Count {
			norm *= math.Sqrt2
		}
		c := cfg
		c.NoiseMemory = DefaultNoiseMemory
		e, err := newExactPath(c, cfg.Dim+map[bool]int{true: 1}[cfg.Count], norm)
		if err != nil {
			t.Fatal(err)
		}
		req.Lattice = e.lattice()
	}
	plan, err := privacy.PlanRelease(req)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestAggregatorAsksThePlanner: for the same settings, the aggregator's
// noise multiplier, sensitivity, accounting, assumptions and epsilon spent
// are the planner's (privacy.PlanRelease), on both arithmetics, and its
// contributions are refused exactly when the planner's participation rule
// refuses them (issue 29: the aggregator keeps no copy of the rules).
func TestAggregatorAsksThePlanner(t *testing.T) {
	ctx := context.Background()
	for _, s := range []setup{
		{mech: "tree-online", workload: Workload{Kind: PrefixSum}, n: 8, d: 3, k: 2, b: 3},
		{mech: "dpsgd", workload: Workload{Kind: Window, Window: 2}, n: 8, d: 2, k: 1, b: 1, count: true, seed: testSeed},
		{mech: "mf-single", workload: Workload{Kind: Momentum, Beta: 0.9}, n: 8, d: 2, k: 3, b: 2, float: true},
	} {
		cfg := s.config(t)
		plan := samePlan(t, cfg)
		a := open(t, filepath.Join(t.TempDir(), "a.db"), cfg)
		claim := plan.Claim(cfg.Clip, a.norm)
		joined := map[string][]int{}
		for step := 1; step <= s.n; step++ {
			for _, id := range []string{"u1", "u2", "u3"} {
				if (step+len(id)+int(id[1]))%2 == 0 {
					continue
				}
				_, err := a.Add(ctx, id, []float64{1, 0, 0}[:s.d])
				want := plan.Admit(joined[id], step)
				var rej *RejectError
				switch {
				case want == nil && err != nil, want != nil && (!errors.As(err, &rej) || rej.Detail != want.(*privacy.Refusal).Reason):
					t.Fatalf("%s: %s at step %d: %v, the planner says %v", s.mech, id, step, err, want)
				case want == nil:
					joined[id] = append(joined[id], step)
				}
			}
			if _, err := a.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			l := a.Ledger()
			spent, err := plan.EpsilonSpent(ctx, step)
			if err != nil {
				t.Fatal(err)
			}
			if l.NoiseMultiplier != plan.NoiseMultiplier || l.Sensitivity != plan.NoiseSensitivity || l.SensitivityMethod != string(plan.Sensitivity.Method) ||
				l.EpsilonSpent != spent || l.EpsilonBudget != plan.Epsilon || l.Delta != plan.Delta || l.Horizon != plan.Horizon || l.Schema != plan.Schema.String() ||
				l.Accountant != claim.Accountant || l.Arithmetic != claim.Arithmetic || l.Covered != claim.Covered || !slices.Equal(l.Assumptions, claim.Assumptions) {
				t.Fatalf("%s step %d: ledger %+v, the planner's %+v, claim %+v, spent %v", s.mech, step, l, plan, claim, spent)
			}
		}
		if l := a.Ledger(); l.Arithmetic != map[bool]string{true: "float", false: "exact"}[s.float] || l.Covered != (s.seed == nil) {
			t.Errorf("%s: arithmetic %s, covered %v", s.mech, l.Arithmetic, l.Covered)
		}
		a.Close()
	}
}

// TestClipRange: a clip norm whose noise scale or releases overflow float64
// (or whose grid loses its precision) is refused at Open with
// dpcore.ErrInvalid; a clip norm near the top of the accepted range
// serves finite releases and a ledger that encodes as JSON. (-clip 1e308
// used to open: the noise scale was +Inf, every commit spent budget and
// failed, and the ledger could not be encoded.)
func TestClipRange(t *testing.T) {
	for _, c := range []setup{
		{mech: "tree-online", workload: Workload{Kind: PrefixSum}, n: 8, d: 2, k: 1, b: 1},
		{mech: "bandmf:2", workload: Workload{Kind: Window, Window: 2}, n: 8, d: 3, k: 1, b: 1, count: true},
	} {
		good := c.config(t)
		for _, clip := range []float64{1e308, math.MaxFloat64, 1e290, 1e-308, 5e-324, math.Inf(1)} {
			cfg := good
			cfg.Clip = clip
			a, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), cfg)
			if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "clip norm") {
				t.Errorf("%s clip %g: %v, want a refusal naming the clip norm", c.mech, clip, err)
			}
			if a != nil {
				a.Close()
			}
		}
		cfg := good
		cfg.Clip = 1e270
		a := open(t, filepath.Join(t.TempDir(), "ok.db"), cfg)
		ctx := context.Background()
		for s := 1; s <= 3; s++ {
			v := make([]float64, cfg.Dim)
			v[0] = -1e270
			if _, err := a.Add(ctx, fmt.Sprint("u", s), v); err != nil {
				t.Fatal(err)
			}
			r, err := a.Commit(ctx)
			if err != nil {
				t.Fatalf("%s clip 1e270: commit %d: %v", c.mech, s, err)
			}
			for _, x := range append(slices.Clone(r.Sum), r.Mean()...) {
				if math.IsInf(x, 0) || math.IsNaN(x) {
					t.Fatalf("%s clip 1e270: release %d holds %v", c.mech, s, r.Sum)
				}
			}
		}
		if _, err := json.Marshal(a.Ledger()); err != nil {
			t.Errorf("%s clip 1e270: ledger: %v", c.mech, err)
		}
		a.Close()
	}
}
