package sampler

import (
	"fmt"
	"math/bits"

	"github.com/dpmf-go/dpmf/dpcore"
)

// poissonSampler is DP-SGD's Poisson sampling over the whole dataset.
type poissonSampler struct {
	core
}

// NewPoisson returns Poisson sampling: every step includes each of the m
// examples independently with probability q (DP-SGD amplification, SPEC 7).
// Each step costs O(q*m) time (geometric skipping) and no O(m) memory.
//
// An example may join any step, so the schema is kb(k=n, b=1) (one pattern:
// every step). Accounting is Poisson(q, n compositions). That amplification
// holds for DP-SGD (a 1-banded, diagonal encoder); for correlated-noise
// mechanisms, Poisson sampling without partitioning gives no bounded-band
// amplification: use NewBandPoisson, or unamplified accounting with this
// schema. privacy.CheckCompatible enforces it.
func NewPoisson(examples int, q float64, steps int, opt Options) (Sampler, error) {
	p := params{kind: kindPoisson, m: examples, n: steps, q: q}
	ps, ss, err := seeds(opt)
	if err != nil {
		return nil, fmt.Errorf("sampler: poisson: %w", err)
	}
	return nilIfErr(newPoisson(p, ps, ss))
}

func newPoisson(p params, permSeed, stepSeed [32]byte) (*poissonSampler, error) {
	if err := checkCommon(p.m, p.n); err != nil {
		return nil, err
	}
	if !(p.q > 0 && p.q <= 1) {
		return nil, invalidf("poisson: rate q = %v must be in (0, 1]", p.q)
	}
	return &poissonSampler{core: newCore(p, permSeed, stepSeed)}, nil
}

func (s *poissonSampler) Next(dst []int) ([]int, error) {
	if err := s.checkNext(); err != nil {
		return dst[:0], err
	}
	dst = bernoulliPositions(dst[:0], s.rng, s.p.m, s.p.q)
	s.step++
	return dst, nil
}

func (s *poissonSampler) ExpectedBatch() float64 { return s.p.q * float64(s.p.m) }

func (s *poissonSampler) Schema() dpcore.Schema {
	return dpcore.Schema{Kind: dpcore.KB, K: s.p.n, B: 1}
}

func (s *poissonSampler) Accounting() Accounting {
	return Accounting{
		Kind:         AccountingPoisson,
		Q:            s.p.q,
		Compositions: s.p.n,
		Bands:        1,
		Assumptions: []string{
			fmt.Sprintf("Poisson sampling: every step includes each of the m = %d examples independently with probability q = %g, with secret randomness", s.p.m, s.p.q),
			fmt.Sprintf("amplified accounting: %d compositions of the Poisson-subsampled Gaussian mechanism; holds only for DP-SGD (C = I, one band)", s.p.n),
			"correlated-noise mechanisms get no amplification from unpartitioned Poisson sampling: account them unamplified with schema kb(k=n, b=1)",
			fmt.Sprintf("the noisy sum is divided by the expected batch size q*m = %g, never the realized size", s.ExpectedBatch()),
		},
	}
}

func (s *poissonSampler) base() *core                 { return &s.core }
func (s *poissonSampler) appendExtra(b []byte) []byte { return b }
func (s *poissonSampler) setExtra(b []byte) error {
	if len(b) != 0 {
		return invalidf("corrupt sampler state: unexpected extra state")
	}
	return nil
}
func (s *poissonSampler) MarshalBinary() ([]byte, error) { return marshal(s) }
func (s *poissonSampler) UnmarshalBinary(data []byte) error {
	return unmarshalInto(s, data)
}

// bandSampler is partitioned band sampling (banded-MF Alg. 2).
type bandSampler struct {
	core
	size int     // floor(m/b), the size of each partition
	q    float64 // B/size
	// parts holds the b partitions back to back, each sorted, so Poisson
	// positions drawn in increasing order map to increasing example indices.
	parts []int32
	set   []uint64 // Floyd's algorithm bitset (fixed size)
}

// NewBandPoisson returns partitioned band sampling (banded-MF Alg. 2, SPEC
// 7): the examples are split at random into b = bands disjoint subsets of
// floor(m/b) each (the remainder is never used), and step i (1-based) draws
// only from subset (i-1) mod b: each of its examples independently with
// probability q = B/floor(m/b), or, with fixedSize, a uniform subset of
// exactly B. bands = 1 is ordinary Poisson DP-SGD.
//
// The schema is minsep(k = ceil(n/b), b). With Poisson draws the accounting
// is amplified BandMF (banded-MF Thm 4): ceil(n/b) compositions of a
// Poisson-subsampled Gaussian with rate q, valid for encoders with at most b
// bands and unit column norms. Thm 4 is proved for Poisson sampling only, and
// this project's accountants handle only Poisson subsampling, so fixedSize
// (sampling without replacement) is accounted unamplified.
//
// Memory is O(m) once (the partitions); a step costs O(B) expected time,
// plus an O(floor(m/b)/64) bitset scan with fixedSize.
func NewBandPoisson(examples, batch, bands, steps int, fixedSize bool, opt Options) (Sampler, error) {
	p := params{kind: kindBandPoisson, m: examples, n: steps, batch: batch, bands: bands, fixed: fixedSize}
	ps, ss, err := seeds(opt)
	if err != nil {
		return nil, fmt.Errorf("sampler: band: %w", err)
	}
	return nilIfErr(newBandPoisson(p, ps, ss))
}

// checkPartitions checks the batch and band count of a partitioned
// sampler (band-Poisson, band allocation) and returns the partition size
// floor(m/b), which must hold at least one batch.
func checkPartitions(p params, what string) (int, error) {
	if err := checkBatch(p.m, p.batch); err != nil {
		return 0, err
	}
	if p.bands <= 0 {
		return 0, invalidf("%s: bands b = %d must be positive", what, p.bands)
	}
	size := p.m / p.bands
	if p.batch > size {
		return 0, invalidf("%s: bands b = %d > m/B = %d/%d: each partition has floor(m/b) = %d < B examples", what, p.bands, p.m, p.batch, size)
	}
	return size, nil
}

func newBandPoisson(p params, permSeed, stepSeed [32]byte) (*bandSampler, error) {
	if err := checkCommon(p.m, p.n); err != nil {
		return nil, err
	}
	size, err := checkPartitions(p, "band")
	if err != nil {
		return nil, err
	}
	s := &bandSampler{core: newCore(p, permSeed, stepSeed), size: size, q: float64(p.batch) / float64(size)}
	s.parts = make([]int32, size*p.bands)
	sortedPartition(s.parts, p.m, p.bands, size, permSeed)
	return s, nil
}

func (s *bandSampler) Next(dst []int) ([]int, error) {
	if err := s.checkNext(); err != nil {
		return dst[:0], err
	}
	part := s.parts[(s.step%s.p.bands)*s.size:][:s.size]
	dst = dst[:0]
	if s.p.fixed {
		dst = s.uniformSubset(dst, part)
	} else {
		dst = bernoulliPositions(dst, s.rng, s.size, s.q)
		for i, pos := range dst {
			dst[i] = int(part[pos])
		}
	}
	s.step++
	return dst, nil
}

// uniformSubset appends a uniform size-B subset of part, increasing, by
// Floyd's algorithm on a bitset of the partition: O(B) random draws and an
// O(floor(m/b)/64) scan that yields the positions in order.
func (s *bandSampler) uniformSubset(dst []int, part []int32) []int {
	if s.set == nil {
		s.set = make([]uint64, (s.size+63)/64)
	}
	clear(s.set)
	for j := s.size - s.p.batch; j < s.size; j++ {
		t := s.rng.IntN(j + 1)
		if s.set[t>>6]&(1<<(t&63)) != 0 {
			t = j
		}
		s.set[t>>6] |= 1 << (t & 63)
	}
	for w, word := range s.set {
		for word != 0 {
			dst = append(dst, int(part[w<<6+bits.TrailingZeros64(word)]))
			word &= word - 1
		}
	}
	return dst
}

// ExpectedBatch is B: q*floor(m/b) = B by construction.
func (s *bandSampler) ExpectedBatch() float64 { return float64(s.p.batch) }

func (s *bandSampler) Schema() dpcore.Schema {
	return dpcore.Schema{Kind: dpcore.MinSep, K: ceilDiv(s.p.n, s.p.bands), B: s.p.bands}
}

func (s *bandSampler) Accounting() Accounting {
	b, k := s.p.bands, ceilDiv(s.p.n, s.p.bands)
	part := fmt.Sprintf("the m = %d examples are split at random into b = %d disjoint partitions of floor(m/b) = %d (%d never used); step i draws only from partition (i-1) mod b, so an example joins at most k = %d steps, a multiple of b apart",
		s.p.m, b, s.size, s.p.m-b*s.size, k)
	if s.p.fixed {
		return Accounting{
			Kind: AccountingUnamplified,
			Assumptions: []string{
				part,
				fmt.Sprintf("fixed-size batches: a uniform subset of exactly B = %d per step (sampling without replacement)", s.p.batch),
				"no amplification is claimed: banded-MF Thm 4 is proved for Poisson sampling, not sampling without replacement",
				fmt.Sprintf("unamplified accounting: one Gaussian mechanism with the mechanism's sensitivity for minsep(k=%d, b=%d)", k, b),
			},
		}
	}
	return Accounting{
		Kind:         AccountingBandPoisson,
		Q:            s.q,
		Compositions: k,
		Bands:        b,
		Assumptions: []string{
			part,
			fmt.Sprintf("Poisson sampling within the partition: each example independently with probability q = B/floor(m/b) = %g, with secret randomness", s.q),
			fmt.Sprintf("amplified BandMF (banded-MF Thm 4): %d compositions of the Poisson-subsampled Gaussian mechanism with rate %g; needs an encoder with at most %d bands and unit column norms", k, s.q, b),
			fmt.Sprintf("the noisy sum is divided by the expected batch size B = %d, never the realized size", s.p.batch),
		},
	}
}

func (s *bandSampler) base() *core                 { return &s.core }
func (s *bandSampler) appendExtra(b []byte) []byte { return b }
func (s *bandSampler) setExtra(b []byte) error {
	if len(b) != 0 {
		return invalidf("corrupt sampler state: unexpected extra state")
	}
	return nil
}
func (s *bandSampler) MarshalBinary() ([]byte, error) { return marshal(s) }
func (s *bandSampler) UnmarshalBinary(data []byte) error {
	return unmarshalInto(s, data)
}

// compile-time checks
var (
	_ impl = (*poissonSampler)(nil)
	_ impl = (*bandSampler)(nil)
)
