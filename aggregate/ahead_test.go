package aggregate

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// heldRows is an exact noise stream whose draws wait while held.
type heldRows struct {
	rowSource
	held  atomic.Bool
	gate  chan struct{} // closed: draws go on
	calls atomic.Int64
}

func (h *heldRows) Next(dst []*big.Int) error {
	if h.held.Load() {
		<-h.gate
	}
	h.calls.Add(1)
	return h.rowSource.Next(dst)
}

// TestReleasePathDrawsNoNoise: a commit draws no noise. The exact
// sampler's time depends on |z|, and a release minus its data is the
// noise, so noise drawn while a commit runs makes the commit's latency a
// function of the data given the release; the rows of step t are drawn
// when step t-1 is released (or when the store opens), before step t's
// contributions. With every draw held, a commit still answers, and the
// releases are the seed's: the rows drawn ahead are the ones the store's
// noise state redraws, across a reopen. (Before, the commit drew step t's
// rows itself and waited for the held draws.)
func TestReleasePathDrawsNoNoise(t *testing.T) {
	for _, c := range []setup{
		{mech: "tree-online", workload: Workload{Kind: PrefixSum}, n: 8, d: 3, k: 1, b: 1},
		{mech: "bandmf:2", workload: Workload{Kind: PrefixSum}, n: 8, d: 3, k: 1, b: 1},
	} {
		t.Run(c.mech, func(t *testing.T) {
			c.seed = testSeed
			cfg := c.config(t)
			var h *heldRows
			cfg.wrapRows = func(s rowSource) rowSource {
				h = &heldRows{rowSource: s, gate: make(chan struct{})}
				return h
			}
			path := filepath.Join(t.TempDir(), "s.db")
			a := open(t, path, cfg)
			ctx := context.Background()
			var released [][]float64
			commit := func(s int) {
				t.Helper()
				v := []float64{0.25 * float64(s), -0.5, 1}
				if _, err := a.Add(ctx, fmt.Sprint("u", s), v); err != nil {
					t.Fatal(err)
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				r, err := a.Commit(cctx)
				if err != nil {
					t.Fatalf("commit %d with the noise draws held: %v", s, err)
				}
				released = append(released, r.Sum)
			}
			// Let the rows of step 1 be drawn, then hold every draw.
			deadline := time.Now().Add(10 * time.Second)
			for h.calls.Load() < int64(len(a.exact.rowsAt[0])) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			h.held.Store(true)
			before := h.calls.Load()
			commit(1)
			if got := h.calls.Load(); got != before {
				t.Fatalf("commit 1 drew %d rows of noise", got-before)
			}
			close(h.gate)
			commit(2)
			commit(3)
			a.Close()
			a = open(t, path, cfg)
			commit(4)
			defer a.Close()
			noise, err := a.SeededNoise(4)
			if err != nil {
				t.Fatal(err)
			}
			grid := a.Ledger().Grid
			sum := []float64{0, 0, 0}
			for s := 1; s <= 4; s++ {
				sum[0] += 0.25 * float64(s)
				sum[1] -= 0.5
				sum[2]++
				for i := range sum {
					if w := sum[i] + noise[s-1][i]; math.Abs(released[s-1][i]-w) > float64(s)*grid+1e-9*math.Abs(w) {
						t.Fatalf("release %d[%d] = %.12g, want the seed's %.12g", s, i, released[s-1][i], w)
					}
				}
			}
		})
	}
}
