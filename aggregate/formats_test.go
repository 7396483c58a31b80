package aggregate

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/accountant"
)

// formatSetups are the stores the release at commit 3258d09 wrote to
// testdata/formats: each after releases 1-3 and two of step 4's three
// contributions (contributor "p<s><j>" adds (j, 0.5, s/10) at step s).
// A snapshot (Aggregator.Snapshot) is a copy of such a store. Each store
// is reopened with the mechanism it holds (StoredMechanism), as dpserve
// reopens it.
var formatSetups = []setup{
	{mech: "mf-single", workload: Workload{Kind: PrefixSum}, k: 1, b: 1},
	{mech: "bandmf:3", workload: Workload{Kind: Momentum, Beta: 0.7}, k: 2, b: 3},
	{mech: "blt:2", workload: Workload{Kind: Window, Window: 2}, k: 1, b: 1},
	{mech: "dpsgd", workload: Workload{Kind: PrefixSum}, k: 1, b: 1, float: true},
}

func formatStoreName(c setup) string {
	name := strings.NewReplacer(":", "_").Replace(c.mech)
	if c.float {
		name += "-float"
	}
	return "store-" + name + "-3258d09.db.gz"
}

// formatRun adds and commits steps from..8 of the fixture's stream; at
// step 4 it adds only contributors j in js4.
func formatRun(t *testing.T, a *Aggregator, from int, js4 []int) [][]float64 {
	t.Helper()
	var out [][]float64
	for s := from; s <= 8; s++ {
		js := []int{0, 1, 2}
		if s == 4 {
			js = js4
		}
		for _, j := range js {
			if _, err := a.Add(context.Background(), fmt.Sprint("p", s, j), []float64{float64(j), 0.5, float64(s) / 10}); err != nil {
				t.Fatal(err)
			}
		}
		if s == 4 && len(js4) == 2 && from == 1 {
			return out // what the fixture holds
		}
		r, err := a.Commit(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Sum)
	}
	return out
}

// readGzip reads a gzipped fixture (a bbolt file is mostly zero pages).
func readGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(z)
}

// TestFormatStore3258d09: each store opens, serves releases 1-3 as
// recorded, and continues (the open step's two contributions, the noise
// state, the participation records) with the releases of an
// uninterrupted run; the ledger JSON of the float store, as dpserve served
// it, decodes to the ledger of the same state.
func TestFormatStore3258d09(t *testing.T) {
	for _, c := range formatSetups {
		c.n, c.d, c.seed = 8, 3, testSeed
		cfg := c.config(t)
		path := filepath.Join(t.TempDir(), "r.db")
		b, err := readGzip(filepath.Join("testdata", "formats", formatStoreName(c)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		// As dpserve does, a store's own mechanism is reused (an optimized
		// one may come out otherwise from a newer optimizer).
		stored, err := StoredMechanism(path, cfg.Mechanism.Schema())
		if err != nil {
			t.Fatal(err)
		}
		if stored != nil {
			cfg.Mechanism = stored
		}
		// The exact stores were calibrated before issue 43: they reopen
		// with that multiplier (and so the noise they drew), which the
		// uninterrupted reference run uses too.
		ref, err := openCalibrated(context.Background(), filepath.Join(t.TempDir(), "ref.db"), cfg, true)
		if err != nil {
			t.Fatal(err)
		}
		want := formatRun(t, ref, 1, []int{0, 1, 2})
		ref.Close()
		a := open(t, path, cfg)
		if v1, _ := accountant.DiscreteGaussianSigmaV1(cfg.Epsilon, cfg.Delta); !c.float && a.Plan().NoiseMultiplier != v1 {
			t.Fatalf("%s: reopened with sigma %v, want the store's %v", c.mech, a.Plan().NoiseMultiplier, v1)
		}
		if claim := strings.Join(a.Ledger().Assumptions, "\n"); !c.float && !strings.Contains(claim, "calibrated before issue 43") {
			t.Errorf("%s: the claim does not say the store keeps its earlier calibration: %s", c.mech, claim)
		}
		for s := 1; s <= 3; s++ {
			r, err := a.Release(s)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Sum, want[s-1]) {
				t.Fatalf("%s: stored release %d = %v, want %v", c.mech, s, r.Sum, want[s-1])
			}
		}
		if c.float {
			lb, err := os.ReadFile(filepath.Join("testdata", "formats", "ledger-3258d09.json"))
			if err != nil {
				t.Fatal(err)
			}
			var old map[string]any
			if err := json.Unmarshal(lb, &old); err != nil {
				t.Fatal(err)
			}
			var l Ledger
			if err := json.Unmarshal(lb, &l); err != nil {
				t.Fatal(err)
			}
			nb, _ := json.Marshal(a.Ledger())
			var now map[string]any
			json.Unmarshal(nb, &now)
			for k, v := range old {
				if fmt.Sprint(now[k]) != fmt.Sprint(v) {
					t.Errorf("ledger %s: file %v, store %v", k, v, now[k])
				}
			}
			if l.Steps != 3 || l.ContributionsAccepted != 11 {
				t.Errorf("ledger file: %d steps, %d contributions; want 3, 11", l.Steps, l.ContributionsAccepted)
			}
		}
		got := formatRun(t, a, 4, []int{2})
		a.Close()
		for i := range got {
			if !slices.Equal(got[i], want[3+i]) {
				t.Fatalf("%s: release %d after reopening the file = %v, uninterrupted %v", c.mech, 4+i, got[i], want[3+i])
			}
		}
	}
}
