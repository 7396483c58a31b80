package aggregate

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
)

// WorkloadKind names what a release is: a function of the noisy per-step
// sums y_1..y_t.
type WorkloadKind int

const (
	// PrefixSum releases sum_{i<=t} y_i (mechanism workload: the prefix sum).
	PrefixSum WorkloadKind = iota
	// Momentum releases the exponentially weighted sum m_t = beta m_{t-1}
	// + y_t. The mechanism is built for the momentum workload with rate 1,
	// A = S M_beta, whose release theta_t = sum_{i<=t} m_i gives m_t =
	// theta_t - theta_{t-1} by post-processing.
	Momentum
	// Window releases the sum of the last Window steps, P_t - P_{t-W},
	// post-processing of the prefix-sum mechanism's release P.
	Window
)

// Workload is the aggregate released at every step.
type Workload struct {
	Kind WorkloadKind
	// Beta is the momentum in [0,1) for Momentum.
	Beta float64
	// Window is the number of steps summed for Window (>= 1).
	Window int
}

// String is the name ParseWorkload accepts: "prefix", "momentum:0.9",
// "window:16".
func (w Workload) String() string {
	switch w.Kind {
	case PrefixSum:
		return "prefix"
	case Momentum:
		return "momentum:" + strconv.FormatFloat(w.Beta, 'g', -1, 64)
	case Window:
		return "window:" + strconv.Itoa(w.Window)
	}
	return fmt.Sprintf("WorkloadKind(%d)", int(w.Kind))
}

// ParseWorkload parses "prefix", "momentum:BETA" or "window:W" (for command
// lines; the library takes Workload values).
func ParseWorkload(s string) (Workload, error) {
	kind, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	switch kind {
	case "prefix":
		if hasArg {
			return Workload{}, invalidf("workload %q: prefix takes no argument", s)
		}
		return Workload{Kind: PrefixSum}, nil
	case "momentum":
		b, err := strconv.ParseFloat(arg, 64)
		if !hasArg || err != nil || !(b >= 0 && b < 1) {
			return Workload{}, invalidf("workload %q: want momentum:BETA with BETA in [0,1)", s)
		}
		return Workload{Kind: Momentum, Beta: b}, nil
	case "window":
		w, err := strconv.Atoi(arg)
		if !hasArg || err != nil || w < 1 {
			return Workload{}, invalidf("workload %q: want window:W with W a positive integer", s)
		}
		return Workload{Kind: Window, Window: w}, nil
	}
	return Workload{}, invalidf("unknown workload %q (known: prefix, momentum:BETA, window:W)", s)
}

// MechanismWorkload is the workload over n steps the mechanism must
// be built for.
func (w Workload) MechanismWorkload(n int) (dpcore.Workload, error) {
	switch w.Kind {
	case PrefixSum, Window:
		return dpcore.PrefixSum(n)
	case Momentum:
		return dpcore.MomentumWorkload(n, w.Beta, dpcore.ConstantSchedule(1))
	}
	return dpcore.Workload{}, invalidf("unknown workload kind %d", int(w.Kind))
}

func (w Workload) validate(n int) error {
	if _, err := w.MechanismWorkload(n); err != nil {
		return fmt.Errorf("aggregate: workload %s: %w", w, err)
	}
	if w.Kind == Window && w.Window < 1 {
		return invalidf("workload window %d, want >= 1", w.Window)
	}
	return nil
}

// Config configures an Aggregator. The store remembers the fields that
// determine the releases and refuses to reopen with different ones.
type Config struct {
	// Dim is the dimension d of a contribution vector.
	Dim int
	// Workload is what each step releases.
	Workload Workload
	// Mechanism supplies the noise; its workload must be
	// Workload.MechanismWorkload(horizon), its N is the horizon (the
	// number of releases the budget covers) and its schema must be
	// Schema(K, B).
	Mechanism NamedStrategy
	// Epsilon and Delta are the target guarantee over the whole horizon;
	// the noise multiplier is calibrated to them.
	Epsilon, Delta float64
	// Clip is zeta: contributions are scaled down to L2 norm <= Clip.
	Clip float64
	// K and B: a contributor joins at most K steps, any two at least B
	// steps apart.
	K, B int
	// Count adds a count (and so a mean) to every release: each
	// contribution carries one more coordinate equal to Clip, so a record
	// has L2 norm at most Clip*sqrt(2) and all noise is that much larger.
	Count bool
	// Seed is nil for noise seeded from crypto/rand (required for
	// privacy) or a seed for reproducible tests; the ledger then states
	// that its releases are not covered by the guarantee.
	Seed *dpcore.Seed
	// MaxBatch bounds the contributions made durable by one transaction
	// (group commit); 0 means 4096.
	MaxBatch int
	// NoiseMemory bounds the noise source's state in bytes (it is also
	// written to the store at every release); 0 means 1 GiB. Mechanisms
	// whose fastest streaming method needs more regenerate noise instead,
	// or are refused with the memory they need. The store remembers it:
	// the noise state restores only under the same plan. With the exact
	// arithmetic, the next step's noise rows, drawn ahead of its release,
	// are held beside it (8 bytes per coordinate of each row).
	NoiseMemory int64
	// NoSync skips the fsync of each transaction. Only for a store that is
	// a cache rebuilt from a durable replicated log and snapshots (dpserve
	// -nats): a crash may then lose any recent transaction.
	NoSync bool

	// floatNoise selects the float path of the releases before the exact
	// arithmetic: float32 noise scaled and added in float64, open to
	// Mironov's floating-point attack. Tests and benchmarks only (the
	// attack must succeed against it).
	floatNoise bool
	// wrapRows wraps the exact noise stream (tests: count or hold its
	// draws).
	wrapRows func(rowSource) rowSource
}

// DefaultNoiseMemory is the noise memory budget when Config.NoiseMemory is 0.
const DefaultNoiseMemory = 1 << 30

// noiseWorkers is fixed so the noise source's memory plan, which a
// restored state must match, does not depend on the machine.
const noiseWorkers = 2

func (c *Config) validate() error {
	if c.Mechanism == nil || c.Mechanism.Strategy() == nil {
		return invalidf("no mechanism")
	}
	n := c.Mechanism.Workload().N
	if c.Dim < 1 || c.Dim > maxDim {
		return invalidf("dimension %d, want 1..%d", c.Dim, maxDim)
	}
	if n < 1 {
		return invalidf("horizon %d, want >= 1", n)
	}
	if err := c.Workload.validate(n); err != nil {
		return err
	}
	want, _ := c.Workload.MechanismWorkload(n)
	got := c.Mechanism.Workload()
	if got.Kind != want.Kind || got.N != want.N || got.Momentum != want.Momentum {
		return invalidf("mechanism %s is built for workload %s, want %s", c.Mechanism.Name(), got, want)
	}
	if !(c.Clip > 0) || math.IsInf(c.Clip, 0) {
		return invalidf("clip norm %v, want a positive finite number", c.Clip)
	}
	s, err := c.participation().Schema()
	if err != nil {
		return err
	}
	if ms := c.Mechanism.Schema(); ms != s {
		return invalidf("mechanism sensitivity is for %s, but the aggregator enforces %s (k=%d, b=%d)", ms, s, c.K, c.B)
	}
	if c.MaxBatch < 0 || c.NoiseMemory < 0 {
		return invalidf("max batch %d and noise memory %d must be >= 0", c.MaxBatch, c.NoiseMemory)
	}
	return nil
}

// participation is the rule the aggregator enforces, the planner's.
func (c *Config) participation() privacy.Participation { return privacy.Participation{K: c.K, B: c.B} }

// maxDim bounds d: a release of 2^24 float64 is 128 MiB.
const maxDim = 1 << 24
