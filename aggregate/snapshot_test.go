package aggregate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/privacy"
)

func openTreeOnline(t testing.TB, path string, noSync bool) *aggregate.Aggregator {
	t.Helper()
	agg, err := openSmall(path, noSync)
	if err != nil {
		t.Fatal(err)
	}
	return agg
}

// openSmall opens (or creates) a store of 2-dimensional sums over 8 steps
// with the online tree mechanism, reusing the mechanism a store holds.
func openSmall(path string, noSync bool) (*aggregate.Aggregator, error) {
	ctx := context.Background()
	workload := aggregate.Workload{Kind: aggregate.PrefixSum}
	w, err := workload.MechanismWorkload(8)
	if err != nil {
		return nil, err
	}
	schema, err := privacy.Participation{K: 2, B: 2}.Schema()
	if err != nil {
		return nil, err
	}
	mech, err := aggregate.StoredMechanism(path, schema)
	if err != nil {
		return nil, err
	}
	if mech == nil {
		spec, err := privacy.ParseMechanism("tree-online")
		if err != nil {
			return nil, err
		}
		if mech, err = aggregate.BuildMechanism(ctx, spec, w, schema); err != nil {
			return nil, err
		}
	}
	return aggregate.Open(ctx, path, aggregate.Config{Dim: 2, Workload: workload, Mechanism: mech,
		Epsilon: 1, Delta: 1e-6, Clip: 1, K: 2, B: 2, Count: true, NoSync: noSync})
}

// TestSnapshot: a store opened from a snapshot taken right after release 1
// continues exactly as the original (with CSPRNG noise: the noise state is
// in the snapshot, nothing is redrawn): same participation decisions, same
// release 2, same ledger; and a snapshot of a closed store is refused with
// ErrClosed.
func TestSnapshot(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	orig := openTreeOnline(t, filepath.Join(dir, "a.db"), true)
	defer orig.Close()
	if _, err := orig.Add(ctx, "u1", []float64{0.6, 0.8}); err != nil {
		t.Fatal(err)
	}
	if _, err := orig.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orig.Snapshot(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cp := openTreeOnline(t, filepath.Join(dir, "b.db"), false)
	defer cp.Close()
	var rels [][]float64
	for _, a := range []*aggregate.Aggregator{orig, cp} {
		if _, err := a.Add(ctx, "u1", []float64{1, 0}); !errors.Is(err, aggregate.ErrSeparation) {
			t.Fatalf("u1 again at step 2: %v, want ErrSeparation", err)
		}
		if _, err := a.Add(ctx, "u2", []float64{0, 1}); err != nil {
			t.Fatal(err)
		}
		rel, err := a.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, append(rel.Sum, rel.Count))
	}
	if !slices.Equal(rels[0], rels[1]) {
		t.Fatalf("release 2: original %v, from the snapshot %v", rels[0], rels[1])
	}
	if lo, lc := orig.Ledger(), cp.Ledger(); lo.Steps != 2 || lo.EpsilonSpent != lc.EpsilonSpent || lo.ContributionsAccepted != lc.ContributionsAccepted {
		t.Fatalf("ledgers differ: %+v and %+v", lo, lc)
	}
	cp.Close()
	if _, err := cp.Snapshot(&discard{}); !errors.Is(err, aggregate.ErrClosed) {
		t.Fatalf("snapshot of a closed store: %v", err)
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// Snapshot copies a store while it serves, for example right after a
// release, and the copy continues from that state.
func ExampleAggregator_Snapshot() {
	dir, err := os.MkdirTemp("", "aggregate-snapshot")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	agg, err := openSmall(filepath.Join(dir, "sums.db"), false)
	if err != nil {
		log.Fatal(err)
	}
	defer agg.Close()
	ctx := context.Background()
	agg.Add(ctx, "user-1", []float64{0.6, 0.8})
	agg.Commit(ctx)
	f, err := os.Create(filepath.Join(dir, "copy.db"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := agg.Snapshot(f); err != nil {
		log.Fatal(err)
	}
	f.Close()
	cp, err := openSmall(filepath.Join(dir, "copy.db"), false)
	if err != nil {
		log.Fatal(err)
	}
	defer cp.Close()
	fmt.Println("the copy has", cp.Ledger().Steps, "release")
	// Output: the copy has 1 release
}
