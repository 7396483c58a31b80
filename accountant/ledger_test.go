package accountant

import (
	"errors"
	"strings"
	"testing"
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
	if _, err := NewLedgerEntry(acct, e, 1e-5, "replace-one", nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown adjacency: err = %v, want ErrInvalid", err)
	}
}
