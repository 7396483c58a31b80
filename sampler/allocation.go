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

// allocate places every example of epoch e in one of the t steps and
// groups them by step (a counting sort, so each group is increasing).
func (s *allocation) allocate(e int) {
	if s.order == nil {
		s.start, s.order = make([]int32, s.t+1), make([]int32, s.p.m)
	}
	r := mrand.New(mrand.NewChaCha8(derive(s.permSeed, "allocation", uint64(e))))
	// order temporarily holds each example's step.
	clear(s.start)
	for i := range s.order {
		k := int32(r.IntN(s.t))
		s.order[i] = k
		s.start[k+1]++
	}
	for k := 1; k <= s.t; k++ {
		s.start[k] += s.start[k-1]
	}
	// A second pass places example i at the next free slot of its step;
	// the steps are needed again, so draw them again from the same stream.
	r = mrand.New(mrand.NewChaCha8(derive(s.permSeed, "allocation", uint64(e))))
	next := make([]int32, s.t)
	copy(next, s.start[:s.t])
	for i := range s.order {
		k := r.IntN(s.t)
		s.order[next[k]] = int32(i)
		next[k]++
	}
	s.epoch = e
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
