package sampler

import (
	"fmt"
	mrand "math/rand/v2"

	"github.com/dpmf-go/dpmf/dpcore"
)

// allocation is random allocation (balls-and-bins): each epoch every example
// is placed in exactly one of the epoch's t steps, chosen uniformly and
// independently of the other examples.
type allocation struct {
	core
	t     int     // steps per epoch, floor(m/B)
	start []int32 // start[s] .. start[s+1]: the current epoch's step s in order
	order []int32 // the m examples grouped by step, each group increasing
	epoch int     // epoch order belongs to; -1 before the first
}

// NewRandomAllocation returns random allocation (Feldman and Shenfeld
// 2025, "random 1-out-of-t allocation"; balls-and-bins sampling of Chua et
// al. 2024): the run is cut into epochs of t = floor(m/B) steps, and in
// every epoch each of the m examples joins exactly one step, drawn
// uniformly from the t and independently of every other example and of
// other epochs. Batch sizes vary (Binomial(m, 1/t), mean m/t >= B); the
// noisy sum is divided by the expected batch m/t. A last, partial epoch
// uses the steps it has: an example placed in a step beyond n does not
// join that epoch.
//
// An example can join the last step of one epoch and the first of the
// next, so the schema is minsep(k = ceil(n/t), b = 1), as for shuffling.
// Accounting is AccountingRandomAllocation: ceil(n/t) compositions of the
// random allocation of one example to one of t Gaussian steps, which
// holds for DP-SGD (C = I); privacy.CheckCompatible refuses it for
// correlated noise.
//
// Each epoch's allocation is a function of the seed and the epoch only, so
// a restored sampler rebuilds it without saving O(m) state. Memory is
// O(m); each epoch costs O(m) time.
func NewRandomAllocation(examples, batch, steps int, opt Options) (Sampler, error) {
	p := params{kind: kindAllocation, m: examples, n: steps, batch: batch}
	ps, ss, err := seeds(opt)
	if err != nil {
		return nil, fmt.Errorf("sampler: random allocation: %w", err)
	}
	return nilIfErr(newAllocation(p, ps, ss))
}

func newAllocation(p params, permSeed, stepSeed [32]byte) (*allocation, error) {
	if err := checkCommon(p.m, p.n); err != nil {
		return nil, err
	}
	if err := checkBatch(p.m, p.batch); err != nil {
		return nil, err
	}
	t := p.m / p.batch
	// The O(m) slices are made by the first Next, so restoring a state
	// allocates nothing its size fields ask for.
	return &allocation{core: newCore(p, permSeed, stepSeed), t: t, epoch: -1}, nil
}

// allocate places every example of epoch e in one of the t steps.
func (s *allocation) allocate(e int) {
	if s.order == nil {
		s.start, s.order = make([]int32, s.t+1), make([]int32, s.p.m)
	}
	allocateInto(s.start, s.order, s.t, derive(s.permSeed, "allocation", uint64(e)))
	s.epoch = e
}

// allocateInto places each of the len(order) positions in one of t steps,
// uniformly and independently by the stream of seed, and groups them by
// step: order[start[k]:start[k+1]] are step k's positions, increasing (a
// counting sort). The steps are drawn twice from the same stream, so no
// O(m) scratch is needed.
func allocateInto(start, order []int32, t int, seed [32]byte) {
	r := mrand.New(mrand.NewChaCha8(seed))
	clear(start)
	for range order {
		start[r.IntN(t)+1]++
	}
	for k := 1; k <= t; k++ {
		start[k] += start[k-1]
	}
	r = mrand.New(mrand.NewChaCha8(seed))
	next := make([]int32, t)
	copy(next, start[:t])
	for i := range order {
		k := r.IntN(t)
		order[next[k]] = int32(i)
		next[k]++
	}
}

func (s *allocation) Next(dst []int) ([]int, error) {
	if err := s.checkNext(); err != nil {
		return dst[:0], err
	}
	if e := s.step / s.t; e != s.epoch {
		s.allocate(e)
	}
	k := s.step % s.t
	dst = dst[:0]
	for _, x := range s.order[s.start[k]:s.start[k+1]] {
		dst = append(dst, int(x))
	}
	s.step++
	return dst, nil
}

// ExpectedBatch is m/t, the mean of the Binomial(m, 1/t) batch size.
func (s *allocation) ExpectedBatch() float64 { return float64(s.p.m) / float64(s.t) }

func (s *allocation) Schema() dpcore.Schema {
	return dpcore.Schema{Kind: dpcore.MinSep, K: ceilDiv(s.p.n, s.t), B: 1}
}

func (s *allocation) Accounting() Accounting {
	epochs := ceilDiv(s.p.n, s.t)
	return Accounting{
		Kind:           AccountingRandomAllocation,
		Compositions:   epochs,
		AllocationSize: s.t,
		Bands:          1,
		Assumptions: []string{
			fmt.Sprintf("random allocation: in each of %d epochs of t = %d steps, every one of the m = %d examples joins exactly one step, drawn uniformly and independently, with secret randomness", epochs, s.t, s.p.m),
			fmt.Sprintf("amplified accounting: %d compositions of the random allocation of a Gaussian mechanism over t = %d steps (Feldman and Shenfeld 2025); holds only for DP-SGD (C = I, one band)", epochs, s.t),
			fmt.Sprintf("batch sizes vary (Binomial(m, 1/t)); the noisy sum is divided by the expected batch size m/t = %g, never the realized size", s.ExpectedBatch()),
		},
	}
}

func (s *allocation) base() *core                 { return &s.core }
func (s *allocation) appendExtra(b []byte) []byte { return b }
func (s *allocation) setExtra(b []byte) error {
	if len(b) != 0 {
		return invalidf("corrupt sampler state: unexpected extra state")
	}
	return nil
}
func (s *allocation) MarshalBinary() ([]byte, error) { return marshal(s) }
func (s *allocation) UnmarshalBinary(data []byte) error {
	return unmarshalInto(s, data)
}

var _ impl = (*allocation)(nil)

// bandAllocation is partitioned band sampling (banded-MF Alg. 2) with
// random allocation in place of the Poisson draw within each partition.
type bandAllocation struct {
	core
	size  int     // floor(m/b), the size of each partition
	t     int     // steps of a partition in one band epoch, floor(size/B)
	parts []int32 // the b partitions back to back, each sorted
	// per partition: its current band epoch's allocation (positions in
	// the partition grouped by step), as in allocation
	start [][]int32
	order [][]int32
	epoch []int
}

// NewBandAllocation returns partitioned band sampling with random
// allocation: the examples are split at random into b = bands disjoint
// partitions of floor(m/b) (the remainder is never used), step i (1-based)
// draws only from partition (i-1) mod b, and the steps of a partition are
// cut into band epochs of t = floor(floor(m/b)/B) steps in each of which
// every example of the partition joins exactly one step, drawn uniformly
// and independently. Batch sizes vary (Binomial(floor(m/b), 1/t)); the
// noisy sum is divided by floor(m/b)/t. bands = 1 is NewRandomAllocation.
//
// An example joins at most k = ceil(ceil(n/b)/t) steps, a multiple of b
// apart: the schema is minsep(k, b). The accounting is random allocation
// over t steps composed k times, valid for encoders with at most b bands
// and column norms at most 1 (docs/math.md, section 7.1).
func NewBandAllocation(examples, batch, bands, steps int, opt Options) (Sampler, error) {
	p := params{kind: kindBandAllocation, m: examples, n: steps, batch: batch, bands: bands}
	ps, ss, err := seeds(opt)
	if err != nil {
		return nil, fmt.Errorf("sampler: band allocation: %w", err)
	}
	return nilIfErr(newBandAllocation(p, ps, ss))
}

func newBandAllocation(p params, permSeed, stepSeed [32]byte) (*bandAllocation, error) {
	if err := checkCommon(p.m, p.n); err != nil {
		return nil, err
	}
	size, err := checkPartitions(p, "band allocation")
	if err != nil {
		return nil, err
	}
	// The O(m) slices are made by the first Next (see newAllocation).
	return &bandAllocation{core: newCore(p, permSeed, stepSeed), size: size, t: size / p.batch}, nil
}

func (s *bandAllocation) Next(dst []int) ([]int, error) {
	if err := s.checkNext(); err != nil {
		return dst[:0], err
	}
	b := s.p.bands
	if s.parts == nil {
		s.parts = make([]int32, s.size*b)
		sortedPartition(s.parts, s.p.m, b, s.size, s.permSeed)
		s.start, s.order, s.epoch = make([][]int32, b), make([][]int32, b), make([]int, b)
		for j := range b {
			s.start[j], s.order[j], s.epoch[j] = make([]int32, s.t+1), make([]int32, s.size), -1
		}
	}
	j, r := s.step%b, s.step/b // partition, and its r-th step
	if e := r / s.t; e != s.epoch[j] {
		allocateInto(s.start[j], s.order[j], s.t, derive(s.permSeed, "band-allocation", uint64(e)*uint64(b)+uint64(j)))
		s.epoch[j] = e
	}
	k := r % s.t
	part := s.parts[j*s.size:][:s.size]
	dst = dst[:0]
	for _, pos := range s.order[j][s.start[j][k]:s.start[j][k+1]] {
		dst = append(dst, int(part[pos]))
	}
	s.step++
	return dst, nil
}

// ExpectedBatch is floor(m/b)/t, the mean of the Binomial batch size.
func (s *bandAllocation) ExpectedBatch() float64 { return float64(s.size) / float64(s.t) }

func (s *bandAllocation) epochs() int { return ceilDiv(ceilDiv(s.p.n, s.p.bands), s.t) }

func (s *bandAllocation) Schema() dpcore.Schema {
	return dpcore.Schema{Kind: dpcore.MinSep, K: s.epochs(), B: s.p.bands}
}

func (s *bandAllocation) Accounting() Accounting {
	b, k := s.p.bands, s.epochs()
	return Accounting{
		Kind:           AccountingRandomAllocation,
		Compositions:   k,
		AllocationSize: s.t,
		Bands:          b,
		Assumptions: []string{
			fmt.Sprintf("the m = %d examples are split at random into b = %d disjoint partitions of floor(m/b) = %d (%d never used); step i draws only from partition (i-1) mod b", s.p.m, b, s.size, s.p.m-b*s.size),
			fmt.Sprintf("random allocation within each partition: in each of %d band epochs of t = %d of its steps, every example of the partition joins exactly one, drawn uniformly and independently, with secret randomness", k, s.t),
			fmt.Sprintf("amplified accounting: %d compositions of the random allocation of a Gaussian mechanism over t = %d steps; needs an encoder with at most %d bands and column norms at most 1 (docs/math.md, section 7.1)", k, s.t, b),
			fmt.Sprintf("batch sizes vary (Binomial(floor(m/b), 1/t)); the noisy sum is divided by the expected batch size floor(m/b)/t = %g, never the realized size", s.ExpectedBatch()),
		},
	}
}

func (s *bandAllocation) base() *core                 { return &s.core }
func (s *bandAllocation) appendExtra(b []byte) []byte { return b }
func (s *bandAllocation) setExtra(b []byte) error {
	if len(b) != 0 {
		return invalidf("corrupt sampler state: unexpected extra state")
	}
	return nil
}
func (s *bandAllocation) MarshalBinary() ([]byte, error) { return marshal(s) }
func (s *bandAllocation) UnmarshalBinary(data []byte) error {
	return unmarshalInto(s, data)
}

var _ impl = (*bandAllocation)(nil)
