package sampler

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
)

// fixedOrder is (k,b)-participation: one shuffle, the same batches every
// epoch.
type fixedOrder struct {
	core
	b       int     // batches per epoch, floor(m/B)
	batches []int32 // b batches of B back to back, each sorted
}

// NewFixedOrder returns fixed-order epochs (SPEC 7, multi-epoch paper Sec.
// 2): the examples are shuffled once and split into b = floor(m/B) batches of
// B (the remainder is never used); step i (1-based) uses batch (i-1) mod b
// in every epoch. The schema is kb(k = ceil(n/b), b). There is no sampling
// randomness to amplify: accounting is unamplified.
func NewFixedOrder(examples, batch, steps int, opt Options) (Sampler, error) {
	p := params{kind: kindFixedOrder, m: examples, n: steps, batch: batch}
	ps, ss, err := seeds(opt)
	if err != nil {
		return nil, fmt.Errorf("sampler: fixed order: %w", err)
	}
	return nilIfErr(newFixedOrder(p, ps, ss))
}

func newFixedOrder(p params, permSeed, stepSeed [32]byte) (*fixedOrder, error) {
	if err := checkCommon(p.m, p.n); err != nil {
		return nil, err
	}
	if err := checkBatch(p.m, p.batch); err != nil {
		return nil, err
	}
	s := &fixedOrder{core: newCore(p, permSeed, stepSeed), b: p.m / p.batch}
	s.batches = make([]int32, s.b*p.batch)
	sortedPartition(s.batches, p.m, s.b, p.batch, permSeed)
	return s, nil
}

func (s *fixedOrder) Next(dst []int) ([]int, error) {
	if err := s.checkNext(); err != nil {
		return dst[:0], err
	}
	dst = dst[:0]
	for _, e := range s.batches[(s.step%s.b)*s.p.batch:][:s.p.batch] {
		dst = append(dst, int(e))
	}
	s.step++
	return dst, nil
}

func (s *fixedOrder) ExpectedBatch() float64 { return float64(s.p.batch) }

func (s *fixedOrder) Schema() dpcore.Schema {
	return dpcore.Schema{Kind: dpcore.KB, K: ceilDiv(s.p.n, s.b), B: s.b}
}

func (s *fixedOrder) Accounting() Accounting {
	sc := s.Schema()
	return Accounting{
		Kind: AccountingUnamplified,
		Assumptions: []string{
			fmt.Sprintf("fixed-order epochs: the m = %d examples are shuffled once into b = %d batches of B = %d (%d never used); step i uses batch (i-1) mod b in every epoch", s.p.m, s.b, s.p.batch, s.p.m-s.b*s.p.batch),
			"no sampling randomness: no amplification may be claimed",
			fmt.Sprintf("unamplified accounting: one Gaussian mechanism with the mechanism's sensitivity for %v (multi-epoch paper Thm 2.2)", sc),
		},
	}
}

func (s *fixedOrder) base() *core                 { return &s.core }
func (s *fixedOrder) appendExtra(b []byte) []byte { return b }
func (s *fixedOrder) setExtra(b []byte) error {
	if len(b) != 0 {
		return invalidf("corrupt sampler state: unexpected extra state")
	}
	return nil
}
func (s *fixedOrder) MarshalBinary() ([]byte, error) { return marshal(s) }
func (s *fixedOrder) UnmarshalBinary(data []byte) error {
	return unmarshalInto(s, data)
}

// shuffler makes cyclic passes over a fresh permutation each epoch.
type shuffler struct {
	core
	b     int     // batches per epoch, floor(m/B)
	perm  []int32 // the current epoch's b batches of B, each increasing
	epoch int     // epoch perm belongs to; -1 before the first
}

// NewShuffle returns shuffling: each epoch draws a fresh random permutation
// and makes one pass over it in b = floor(m/B) batches of B (the last m mod B
// of each permutation are skipped that epoch).
//
// Because the permutation changes, an example's position differs by epoch:
// it can join the last step of one epoch and the first of the next. So the
// honest schema is minsep(k = ceil(n/b), b = 1), not kb(k, b), which only
// fixed-order epochs realize. The papers' accounting assumes Poisson
// sampling and does not apply to shuffling: Accounting().Kind is
// AccountingNone and the trainer must account unamplified (and say so).
func NewShuffle(examples, batch, steps int, opt Options) (Sampler, error) {
	p := params{kind: kindShuffle, m: examples, n: steps, batch: batch}
	ps, ss, err := seeds(opt)
	if err != nil {
		return nil, fmt.Errorf("sampler: shuffle: %w", err)
	}
	return nilIfErr(newShuffle(p, ps, ss))
}

func newShuffle(p params, permSeed, stepSeed [32]byte) (*shuffler, error) {
	if err := checkCommon(p.m, p.n); err != nil {
		return nil, err
	}
	if err := checkBatch(p.m, p.batch); err != nil {
		return nil, err
	}
	return &shuffler{core: newCore(p, permSeed, stepSeed), b: p.m / p.batch, perm: make([]int32, (p.m/p.batch)*p.batch), epoch: -1}, nil
}

func (s *shuffler) Next(dst []int) ([]int, error) {
	if err := s.checkNext(); err != nil {
		return dst[:0], err
	}
	// Each epoch's batches are a function of the seed and the epoch only,
	// so a restored sampler rebuilds them without saving O(m) state.
	if e := s.step / s.b; e != s.epoch {
		sortedPartition(s.perm, s.p.m, s.b, s.p.batch, derive(s.permSeed, "epoch", uint64(e)))
		s.epoch = e
	}
	dst = dst[:0]
	for _, e := range s.perm[(s.step%s.b)*s.p.batch:][:s.p.batch] {
		dst = append(dst, int(e))
	}
	s.step++
	return dst, nil
}

func (s *shuffler) ExpectedBatch() float64 { return float64(s.p.batch) }

func (s *shuffler) Schema() dpcore.Schema {
	return dpcore.Schema{Kind: dpcore.MinSep, K: ceilDiv(s.p.n, s.b), B: 1}
}

func (s *shuffler) Accounting() Accounting {
	return Accounting{
		Kind: AccountingNone,
		Assumptions: []string{
			fmt.Sprintf("shuffling: a fresh random permutation of the m = %d examples each epoch, passed in b = %d batches of B = %d", s.p.m, s.b, s.p.batch),
			fmt.Sprintf("an example joins once per epoch at a varying position, so two participations can be 1 step apart: schema %v", s.Schema()),
			"the papers' amplified accounting assumes Poisson sampling and does not apply to shuffling; no amplification is claimed",
			"the privacy claim is unamplified: one Gaussian mechanism with the mechanism's sensitivity for this schema",
		},
	}
}

func (s *shuffler) base() *core                 { return &s.core }
func (s *shuffler) appendExtra(b []byte) []byte { return b }
func (s *shuffler) setExtra(b []byte) error {
	if len(b) != 0 {
		return invalidf("corrupt sampler state: unexpected extra state")
	}
	return nil
}
func (s *shuffler) MarshalBinary() ([]byte, error) { return marshal(s) }
func (s *shuffler) UnmarshalBinary(data []byte) error {
	return unmarshalInto(s, data)
}

var (
	_ impl = (*fixedOrder)(nil)
	_ impl = (*shuffler)(nil)
)
