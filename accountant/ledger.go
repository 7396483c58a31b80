package accountant

import (
	"encoding/json"
	"fmt"
)

// LedgerEntry records the privacy guarantee of one run: what was accounted
// for, how, and under which assumptions. It is JSON-serializable; Event
// holds the event's own JSON (see UnmarshalEvent).
type LedgerEntry struct {
	Event      json.RawMessage `json:"event"`
	Accountant string          `json:"accountant"`
	// AccountantConfig records the accountant's settings (RDP orders, PLD
	// grid and tail mass), which the guarantee depends on.
	AccountantConfig map[string]any `json:"accountant_config,omitempty"`
	Params           map[string]any `json:"params,omitempty"`
	Epsilon          float64        `json:"epsilon"`
	Delta            float64        `json:"delta"`
	// Adjacency is the neighbouring relation (epsilon, delta) holds for,
	// stated once per entry.
	Adjacency Adjacency `json:"adjacency"`
	// Unit is what the adjacency changes: "example" or "user" (all of one
	// owner's examples); empty in entries written before it existed, and
	// left to the caller, which knows what it sampled and bounded.
	Unit        string   `json:"unit,omitempty"`
	Assumptions []string `json:"assumptions"`
}

// Adjacency names the neighbouring relation of a guarantee.
type Adjacency string

const (
	// ZeroOut: one example's contribution is replaced by zero at every
	// step it takes part in; the dataset size and the batch positions do
	// not change (the papers' choice; banded-MF Sec. 2 and App. F). It is
	// the one relation under which the sensitivity of a matrix mechanism
	// over fixed-order or shuffled batches is what package mfnoise
	// computes; for a Poisson-subsampled Gaussian it yields the same pair
	// of distributions as add/remove, whose worse direction the
	// accountants report.
	ZeroOut Adjacency = "zero-out"
	// AddRemove: one example is added to or removed from the dataset.
	// Under fixed-order or shuffled batching removing an example moves
	// every later one to another batch, so it is not what those runs can
	// claim.
	AddRemove Adjacency = "add-remove"
)

func (a Adjacency) valid() bool { return a == ZeroOut || a == AddRemove }

// Assumptions every entry states; the accounting is only valid under them.
const (
	// AssumeNoise states the noise distribution; where the randomness
	// comes from (a secret CSPRNG seed, or a caller's seed) is the
	// caller's to state.
	AssumeNoise   = "noise: Gaussian with standard deviation sigma times the L2 sensitivity"
	AssumePoisson = "sampling: Poisson, each example included independently with probability q; shuffling or fixed batches do not get this amplification"
	// AssumeAllocation states the sampling random allocation relies on.
	AssumeAllocation = "sampling: random allocation, each example in exactly one step of each epoch, drawn uniformly and independently of the other examples; shuffling into equal batches does not get this amplification"
)

// NewLedgerEntry accounts for e at delta with acct under adjacency adj and
// returns the entry. params records run parameters (sigma, q, bands, ...)
// for auditors; extra assumptions are appended to the standard ones.
func NewLedgerEntry(acct Accountant, e Event, delta float64, adj Adjacency, params map[string]any, assumptions ...string) (LedgerEntry, error) {
	if acct == nil {
		return LedgerEntry{}, invalidf("ledger: nil accountant")
	}
	if !adj.valid() {
		return LedgerEntry{}, invalidf("ledger: adjacency %q: want %s or %s", adj, ZeroOut, AddRemove)
	}
	comps, err := components(e)
	if err != nil {
		return LedgerEntry{}, fmt.Errorf("ledger: %w", err)
	}
	var eps float64
	var used pldUsed
	if p, ok := acct.(*pldAccountant); ok {
		eps, used, err = p.epsilonUsed(e, delta)
	} else {
		eps, err = acct.Epsilon(e, delta)
	}
	if err != nil {
		return LedgerEntry{}, fmt.Errorf("ledger: %w", err)
	}
	if isInf(eps) {
		return LedgerEntry{}, fmt.Errorf("ledger: no finite epsilon at delta = %v: %w", delta, ErrInfeasible)
	}
	raw, err := e.MarshalJSON()
	if err != nil {
		return LedgerEntry{}, fmt.Errorf("ledger: %w", err)
	}
	as := []string{AssumeNoise}
	for _, c := range comps {
		if c.q < 1 {
			as = append(as, AssumePoisson)
			break
		}
	}
	for _, c := range comps {
		if c.alloc > 1 {
			as = append(as, AssumeAllocation)
			break
		}
	}
	return LedgerEntry{
		Event:            raw,
		Accountant:       acct.Name(),
		AccountantConfig: config(acct, used),
		Params:           params,
		Epsilon:          eps,
		Delta:            delta,
		Adjacency:        adj,
		Assumptions:      append(as, assumptions...),
	}, nil
}

// config describes the settings the package's accountants used. For PLD
// that is the grid spacing of the evaluation (used), which is wider than
// the configured one when a loss distribution would exceed MaxBins cells;
// an exact Gaussian uses no grid.
func config(acct Accountant, used pldUsed) map[string]any {
	switch a := acct.(type) {
	case *rdpAccountant:
		return map[string]any{"orders": a.orders}
	case *pldAccountant:
		c := map[string]any{
			"configured_discretization_interval": a.opt.DiscretizationInterval,
			"tail_mass":                          a.opt.TailMass,
			"max_bins":                           a.opt.MaxBins,
			"discretization":                     "none (exact Gaussian)",
		}
		if used.step > 0 {
			c["discretization_interval"] = used.step
			c["discretization"] = "connect-the-dots (pessimistic)"
		}
		if used.byRDP {
			c["epsilon_from"] = "rdp (the RDP bound of the same event was smaller than the PLD one)"
		}
		return c
	}
	return nil
}
