package accountant

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// A ledger entry states its adjacency once, as the caller gives it, and
// claims nothing about where the noise comes from: both are the planner's
// to state.
func TestLedgerStatesOneAdjacencyAndNoGenerator(t *testing.T) {
	e, _ := DPSGDEvent(1, 0.01, 10)
	acct := NewRDP(nil)
	for _, adj := range []Adjacency{ZeroOut, AddRemove} {
		entry, err := NewLedgerEntry(acct, e, 1e-5, adj, nil)
		if err != nil {
			t.Fatal(err)
		}
		if entry.Adjacency != adj {
			t.Errorf("adjacency %q, want %q", entry.Adjacency, adj)
		}
		for _, a := range entry.Assumptions {
			if strings.Contains(a, "adjacen") || strings.Contains(a, "cryptographically") {
				t.Errorf("assumption %q restates the adjacency or claims a generator", a)
			}
		}
	}
	if _, err := NewLedgerEntry(acct, e, 1e-5, "replace-one", nil); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("unknown adjacency: err = %v, want dpcore.ErrInvalid", err)
	}
}

// The ledger records the grid the PLD accountant used, not the one it was
// configured with: with few bins the accountant widens the spacing, and
// the entry must say so (issue 17). An exact Gaussian uses no grid.
func TestLedgerRecordsWidenedGrid(t *testing.T) {
	e, err := DPSGDEvent(0.6, 0.05, 400)
	if err != nil {
		t.Fatal(err)
	}
	acct := NewPLD(PLDOptions{MaxBins: 1024})
	p := acct.(*pldAccountant)
	dists, err := p.distributions(e)
	if err != nil {
		t.Fatal(err)
	}
	used := 0.0
	for _, d := range dists {
		used = math.Max(used, d.(*pmf).step)
	}
	if !(used > 1e-4) {
		t.Fatalf("the grid was not widened (spacing %v): the test needs an event that widens it", used)
	}
	entry, err := NewLedgerEntry(acct, e, 1e-5, ZeroOut, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := entry.AccountantConfig
	if cfg["discretization_interval"] != used || cfg["configured_discretization_interval"] != 1e-4 {
		t.Errorf("ledger records spacing %v (configured %v), the accountant used %v", cfg["discretization_interval"], cfg["configured_discretization_interval"], used)
	}
	if want, _ := acct.Epsilon(e, 1e-5); entry.Epsilon != want {
		t.Errorf("ledger epsilon %v, Epsilon %v", entry.Epsilon, want)
	}
	// An unamplified Gaussian is accounted exactly, on no grid.
	g, _ := UnamplifiedMFEvent(2)
	entry, err = NewLedgerEntry(acct, g, 1e-5, ZeroOut, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := entry.AccountantConfig["discretization_interval"]; ok || entry.AccountantConfig["discretization"] != "none (exact Gaussian)" {
		t.Errorf("exact Gaussian: config %v", entry.AccountantConfig)
	}
}
