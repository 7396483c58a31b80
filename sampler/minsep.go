package sampler

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/dpmf-go/dpmf/dpcore"
)

// minSep simulates cross-device availability under (k,b)-min-separation.
type minSep struct {
	core
	// last is 1 + the 0-based step of an example's last participation
	// (0: never); count its participations.
	last  []int32
	count []int32
	real  Realization
	cand  []int // scratch
}

// NewMinSep returns a cross-device availability simulator (banded-MF Def.
// 1): on each step every example is available independently with probability
// availability, and an available example is eligible only if it has joined
// fewer than k steps and none of the last b-1 steps. Each step takes a
// uniform subset of B eligible examples, or all of them if fewer are
// eligible, so the realized batch can be smaller than B.
//
// The schema is minsep(k, b); accounting is unamplified (availability is not
// a sampling the analysis may rely on). ExpectedBatch is the nominal B.
// Realized (see Realizer) reports the participation so far. Memory is O(m);
// a step costs O(availability*m) time.
func NewMinSep(examples, batch, k, b, steps int, availability float64, opt Options) (Sampler, error) {
	p := params{kind: kindMinSep, m: examples, n: steps, batch: batch, k: k, b: b, avail: availability}
	ps, ss, err := seeds(opt)
	if err != nil {
		return nil, fmt.Errorf("sampler: min-sep: %w", err)
	}
	return nilIfErr(newMinSep(p, ps, ss))
}

func newMinSep(p params, permSeed, stepSeed [32]byte) (*minSep, error) {
	if err := checkCommon(p.m, p.n); err != nil {
		return nil, err
	}
	if err := checkBatch(p.m, p.batch); err != nil {
		return nil, err
	}
	if p.k <= 0 || p.b <= 0 {
		return nil, invalidf("min-sep: k = %d and b = %d must be positive", p.k, p.b)
	}
	if p.n >= maxExamples {
		// Participation records are int32.
		return nil, invalidf("min-sep: steps n = %d must be below %d", p.n, maxExamples)
	}
	if !(p.avail > 0 && p.avail <= 1) {
		return nil, invalidf("min-sep: availability %v must be in (0, 1]", p.avail)
	}
	return &minSep{core: newCore(p, permSeed, stepSeed), last: make([]int32, p.m), count: make([]int32, p.m)}, nil
}

func (s *minSep) Next(dst []int) ([]int, error) {
	if err := s.checkNext(); err != nil {
		return dst[:0], err
	}
	t := s.step
	avail := bernoulliPositions(s.cand[:0], s.rng, s.p.m, s.p.avail)
	c := avail[:0]
	for _, e := range avail {
		if int(s.count[e]) < s.p.k && (s.last[e] == 0 || t-int(s.last[e]-1) >= s.p.b) {
			c = append(c, e)
		}
	}
	// Partial Fisher-Yates: a uniform B-subset of the eligible examples.
	if len(c) > s.p.batch {
		for i := range s.p.batch {
			j := i + s.rng.IntN(len(c)-i)
			c[i], c[j] = c[j], c[i]
		}
		c = c[:s.p.batch]
	}
	slices.Sort(c)
	dst = append(dst[:0], c...)
	s.cand = avail
	for _, e := range dst {
		if s.last[e] != 0 {
			if gap := t - int(s.last[e]-1); s.real.MinSeparation == 0 || gap < s.real.MinSeparation {
				s.real.MinSeparation = gap
			}
		}
		s.last[e] = int32(t + 1)
		s.count[e]++
		s.real.MaxParticipations = max(s.real.MaxParticipations, int(s.count[e]))
	}
	s.step++
	return dst, nil
}

// Realized reports the largest participation count and smallest separation
// realized so far.
func (s *minSep) Realized() Realization { return s.real }

func (s *minSep) ExpectedBatch() float64 { return float64(s.p.batch) }

func (s *minSep) Schema() dpcore.Schema {
	return dpcore.Schema{Kind: dpcore.MinSep, K: s.p.k, B: s.p.b}
}

func (s *minSep) Accounting() Accounting {
	return Accounting{
		Kind: AccountingUnamplified,
		Assumptions: []string{
			fmt.Sprintf("cross-device participation simulated with availability %g: an example joins at most k = %d steps, any two at least b = %d apart", s.p.avail, s.p.k, s.p.b),
			"availability is not sampling the analysis may rely on: no amplification is claimed",
			fmt.Sprintf("unamplified accounting: one Gaussian mechanism with the mechanism's sensitivity for %v (banded-MF Thm 2/3)", s.Schema()),
			fmt.Sprintf("the noisy sum is divided by the nominal batch size B = %d; fewer examples join when fewer are eligible", s.p.batch),
		},
	}
}

func (s *minSep) base() *core { return &s.core }

func (s *minSep) appendExtra(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(s.real.MaxParticipations))
	b = binary.AppendUvarint(b, uint64(s.real.MinSeparation))
	for i := range s.last {
		b = binary.AppendUvarint(b, uint64(s.last[i]))
		b = binary.AppendUvarint(b, uint64(s.count[i]))
	}
	return b
}

func (s *minSep) setExtra(b []byte) error {
	if len(b) < 2*len(s.last) {
		return invalidf("corrupt sampler state: %d bytes of participation records for m = %d", len(b), len(s.last))
	}
	r := &reader{b: b}
	s.real.MaxParticipations = r.int("max participations")
	s.real.MinSeparation = r.int("min separation")
	for i := range s.last {
		l, c := r.uvarint("last"), r.uvarint("count")
		if l > uint64(s.step) || c > uint64(min(s.p.k, s.step)) {
			r.fail("participation record")
		}
		s.last[i], s.count[i] = int32(l), int32(c)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return r.err
}

func (s *minSep) MarshalBinary() ([]byte, error) { return marshal(s) }
func (s *minSep) UnmarshalBinary(data []byte) error {
	return unmarshalInto(s, data)
}

var (
	_ impl     = (*minSep)(nil)
	_ Realizer = (*minSep)(nil)
)
