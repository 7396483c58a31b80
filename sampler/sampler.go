// Package sampler decides which examples join each training step, and so
// which participation schema the mechanism's sensitivity and which
// accounting the accountant must assume (SPEC 3 and 7).
//
// Every sampler reports both from the plan it actually follows: Schema is the
// set of step patterns one example can realize, Accounting says whether
// amplification by sampling may be claimed and with which parameters.
// The rules that bind a mechanism and an accounting to a sampler
// (privacy.CheckCompatible) live in package privacy, the planner, so a run
// cannot silently use a sampler whose participation differs from what its
// privacy claim assumed.
//
// Samplers are deterministic given Options.Seed and seeded from crypto/rand
// otherwise. Their state (ChaCha8 generator and counters) round-trips through
// MarshalBinary/UnmarshalBinary, so a run restored from a checkpoint draws
// exactly the batches it would have drawn without the interruption.
package sampler

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"

	"github.com/dpmf-go/dpmf/dpcore"
)

// ErrExhausted is wrapped by the error Next returns once all steps are done.
var ErrExhausted = errors.New("all steps done")

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("sampler", format, args...)
}

// Sampler yields the examples of each step of a fixed-length run. A Sampler
// is not safe for concurrent use. The samplers of this package also
// implement fmt.Stringer (their kind and parameters).
type Sampler interface {
	// Next appends the next step's example indices (0-based, increasing) to
	// dst[:0] and returns the result. After Steps() steps it returns an error
	// wrapping ErrExhausted.
	Next(dst []int) ([]int, error)
	// Step is the number of steps done.
	Step() int
	// Steps is the total number of steps n.
	Steps() int
	// Examples is the dataset size m.
	Examples() int
	// ExpectedBatch is the data-independent batch size the trainer divides
	// the noisy sum by; never the realized size (SPEC 7).
	ExpectedBatch() float64
	// Schema is the participation schema the plan realizes: the sensitivity
	// of the mechanism must be computed for a schema containing it.
	Schema() dpcore.Schema
	// Accounting says which privacy accounting the plan supports.
	Accounting() Accounting
	// MarshalBinary saves the exact state, mid-epoch included. The state
	// predicts every remaining batch: keep it as secret as the noise state.
	MarshalBinary() ([]byte, error)
	// UnmarshalBinary restores a state saved by a sampler built with the same
	// constructor and parameters (the seed is taken from the state).
	UnmarshalBinary(data []byte) error
}

// Realizer is implemented by samplers whose participation depends on
// simulated randomness beyond the plan (NewMinSep): Realized reports what
// actually happened so far.
type Realizer interface {
	Realized() Realization
}

// Realization is the participation realized so far.
type Realization struct {
	// MaxParticipations is the largest number of steps any example joined.
	MaxParticipations int
	// MinSeparation is the smallest gap between two participations of one
	// example; 0 when no example has participated twice.
	MinSeparation int
}

// AccountingKind names the privacy accounting a sampler supports.
type AccountingKind string

const (
	// AccountingUnamplified: no amplification may be claimed; the run is one
	// Gaussian mechanism with the sensitivity of the schema (SPEC 1, 8).
	AccountingUnamplified AccountingKind = "unamplified"
	// AccountingPoisson: Poisson-subsampled Gaussian with rate Q composed
	// Compositions times (DP-SGD, C = I).
	AccountingPoisson AccountingKind = "poisson"
	// AccountingBandPoisson: amplified banded MF (banded-MF Thm 4):
	// Q = B/floor(m/b), Compositions = ceil(n/b), for encoders with at most
	// Bands bands and unit column norms.
	AccountingBandPoisson AccountingKind = "band-poisson"
	// AccountingNone: shuffling. No amplification, and the papers'
	// accounting does not apply; the trainer uses unamplified accounting and
	// says so.
	AccountingNone AccountingKind = "none"
	// AccountingRandomAllocation: random allocation of each example to one
	// of AllocationSize Gaussian steps per epoch, composed Compositions
	// times: DP-SGD (C = I) with Bands = 1; with Bands = b > 1 (partitions),
	// encoders with at most b bands and column norms at most 1.
	AccountingRandomAllocation AccountingKind = "random-allocation"
)

// Accounting is the privacy accounting a sampler's plan supports.
type Accounting struct {
	Kind AccountingKind `json:"kind"`
	// Q is the sampling rate (Poisson and BandPoisson only).
	Q float64 `json:"q,omitempty"`
	// Compositions is the number of subsampled Gaussian mechanisms composed
	// (Poisson and BandPoisson only).
	Compositions int `json:"compositions,omitempty"`
	// Bands is the largest number of encoder bands the amplification holds
	// for: the number of partitions (1 for Poisson).
	Bands int `json:"bands,omitempty"`
	// AllocationSize is the number of steps t an example is allocated
	// among in each epoch (RandomAllocation only).
	AllocationSize int `json:"allocation_size,omitempty"`
	// Assumptions states, in words, what the accounting relies on; the
	// trainer prints them with the privacy claim.
	Assumptions []string `json:"assumptions"`
}

// Options configures a sampler. The zero value is the safe default.
type Options struct {
	// Seed, if non-nil, makes the sampler deterministic (tests,
	// reproductions). Nil seeds from crypto/rand: the amplification
	// theorems need sampling the adversary cannot predict.
	Seed *dpcore.Seed
}

// kind tags a sampler in its saved state.
type kind uint8

const (
	kindFixedOrder kind = iota + 1
	kindPoisson
	kindBandPoisson
	kindMinSep
	kindShuffle
	kindAllocation
	kindBandAllocation
)

func (k kind) String() string {
	switch k {
	case kindFixedOrder:
		return "fixed-order epochs"
	case kindPoisson:
		return "Poisson sampling"
	case kindBandPoisson:
		return "partitioned band sampling"
	case kindMinSep:
		return "min-separation availability sampling"
	case kindShuffle:
		return "shuffling"
	case kindAllocation:
		return "random allocation"
	case kindBandAllocation:
		return "partitioned random allocation"
	}
	return fmt.Sprintf("sampler kind %d", uint8(k))
}

// params are the constructor arguments of every kind (unused ones zero);
// saved with the state so a restore into a differently configured sampler is
// refused.
type params struct {
	kind  kind
	m     int // examples
	n     int // steps
	batch int
	bands int
	k, b  int
	fixed bool
	q     float64
	avail float64
}

func (p params) String() string {
	switch p.kind {
	case kindFixedOrder, kindShuffle, kindAllocation:
		return fmt.Sprintf("%v(m=%d, B=%d, n=%d)", p.kind, p.m, p.batch, p.n)
	case kindPoisson:
		return fmt.Sprintf("%v(m=%d, q=%g, n=%d)", p.kind, p.m, p.q, p.n)
	case kindBandPoisson:
		return fmt.Sprintf("%v(m=%d, B=%d, bands=%d, n=%d, fixedSize=%t)", p.kind, p.m, p.batch, p.bands, p.n, p.fixed)
	case kindBandAllocation:
		return fmt.Sprintf("%v(m=%d, B=%d, bands=%d, n=%d)", p.kind, p.m, p.batch, p.bands, p.n)
	case kindMinSep:
		return fmt.Sprintf("%v(m=%d, B=%d, k=%d, b=%d, n=%d, availability=%g)", p.kind, p.m, p.batch, p.k, p.b, p.n, p.avail)
	}
	return p.kind.String()
}

// maxExamples bounds m so permutations fit in int32 (O(m) memory once).
const maxExamples = math.MaxInt32

func checkCommon(m, n int) error {
	if m <= 0 || m > maxExamples {
		return invalidf("examples m = %d must be in [1, %d]", m, maxExamples)
	}
	if n <= 0 {
		return invalidf("steps n = %d must be positive", n)
	}
	return nil
}

func checkBatch(m, batch int) error {
	if batch <= 0 || batch > m {
		return invalidf("batch B = %d must be in [1, m = %d]", batch, m)
	}
	return nil
}

// seeds derives the permutation seed and the step-generator seed from the
// user's seed or from crypto/rand. They are separate so the saved state can
// hold the permutation seed (to rebuild partitions) and the generator's
// current state, but not the seed of past Poisson draws.
func seeds(opt Options) (perm, step [32]byte, err error) {
	var master [32]byte
	switch {
	case opt.Seed == nil:
		if _, err := rand.Read(master[:]); err != nil {
			return perm, step, fmt.Errorf("sampler: seeding from crypto/rand: %w", err)
		}
	default:
		master = *opt.Seed
	}
	return derive(master, "perm", 0), derive(master, "step", 0), nil
}

// derive is a domain-separated hash: independent seeds from one seed.
func derive(seed [32]byte, label string, i uint64) [32]byte {
	h := sha256.New()
	h.Write([]byte("dpmf/sampler/" + label + "\x00"))
	h.Write(seed[:])
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], i)
	h.Write(b[:])
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// core is the state every sampler shares.
type core struct {
	p        params
	step     int
	permSeed [32]byte
	src      *mrand.ChaCha8
	rng      *mrand.Rand
}

func newCore(p params, permSeed, stepSeed [32]byte) core {
	src := mrand.NewChaCha8(stepSeed)
	return core{p: p, permSeed: permSeed, src: src, rng: mrand.New(src)}
}

// String names the sampler kind and its parameters, for logs.
func (c *core) String() string { return c.p.String() }

func (c *core) Step() int     { return c.step }
func (c *core) Steps() int    { return c.p.n }
func (c *core) Examples() int { return c.p.m }

func (c *core) checkNext() error {
	if c.step >= c.p.n {
		return fmt.Errorf("sampler: %v: step %d of %d: %w", c.p.kind, c.step+1, c.p.n, ErrExhausted)
	}
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// sortedPartition fills parts (nb*size entries) with nb disjoint subsets of
// 0..m-1 of size each, subset k in parts[k*size:(k+1)*size] in increasing
// order, the other m - nb*size examples left out. The assignment is uniform
// over all such labelled partitions, the same distribution as cutting a
// uniform permutation into consecutive blocks.
//
// It walks the examples in order and puts each in a bucket drawn with
// probability proportional to the bucket's remaining capacity (a Fenwick
// tree over the nb+1 capacities, the last for left-out examples): O(m log nb)
// time with sequential writes, and no sort, which at m = 10^7 is several
// times faster than Fisher-Yates followed by sorting each block.
func sortedPartition(parts []int32, m, nb, size int, seed [32]byte) {
	r := mrand.New(mrand.NewChaCha8(seed))
	nk := nb + 1
	tree := make([]int, nk+1) // 1-based Fenwick tree of capacities
	for k := 1; k <= nk; k++ {
		v := size
		if k == nk {
			v = m - nb*size
		}
		tree[k] += v
		if p := k + k&-k; p <= nk {
			tree[p] += tree[k]
		}
	}
	top := 1
	for top*2 <= nk {
		top *= 2
	}
	next := make([]int, nb)
	for k := range next {
		next[k] = k * size
	}
	for i := range m {
		// Bucket = number of leading buckets whose capacities sum to <= u.
		u := r.IntN(m - i)
		k := 0
		for step := top; step > 0; step >>= 1 {
			if j := k + step; j <= nk && tree[j] <= u {
				k = j
				u -= tree[j]
			}
		}
		for j := k + 1; j <= nk; j += j & -j {
			tree[j]--
		}
		if k < nb {
			parts[next[k]] = int32(i)
			next[k]++
		}
	}
}

// geometric returns the number of failures before the first success of
// Bernoulli(q) trials, with l = log1p(-q) < 0 (q < 1): P(G >= g) = (1-q)^g.
// Skipping by it makes Poisson sampling O(expected batch) per step.
func geometric(r *mrand.Rand, l float64) int {
	u := 1 - r.Float64() // (0, 1]
	x := math.Log(u) / l
	if x >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int(x)
}

// bernoulliPositions appends each position in [0, size) independently with
// probability q, in increasing order, in time O(q*size + 1).
func bernoulliPositions(dst []int, r *mrand.Rand, size int, q float64) []int {
	if q >= 1 {
		for i := 0; i < size; i++ {
			dst = append(dst, i)
		}
		return dst
	}
	l := math.Log1p(-q)
	for i := -1; ; {
		g := geometric(r, l)
		if g >= size-1-i {
			return dst
		}
		i += g + 1
		dst = append(dst, i)
	}
}
