package noise

import (
	"bytes"
	"encoding/binary"
	"math/big"
	mrand "math/rand/v2"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// DiscreteGaussian samples the discrete Gaussian N_Z(0, sigma^2) on the
// integers, P(x) proportional to exp(-x^2 / (2 sigma^2)), exactly: with the
// rejection samplers of Canonne, Kamath & Steinke (2020, Algorithms 1-3),
// in integer and rational arithmetic only, from uniform random bits. No
// floating-point operation touches a sample, so the set of values a sample
// can take and their probabilities are those of N_Z(0, sigma^2) exactly;
// the only assumption is that the bits are uniform (a ChaCha8 stream from
// a secret key, a CSPRNG).
//
// The variance sigma^2 is a positive rational; sigma itself need not be
// rational. Expected cost: a few dozen Bernoulli trials a sample, each a
// uniform integer below a bound of about twice the bits of sigma^2.
type DiscreteGaussian struct {
	num, den *big.Int // sigma^2 = num / den
	t        *big.Int // floor(sigma) + 1, the discrete Laplace scale
	// gamma(y) = (|y| t den - num)^2 / (2 num den t^2)
	twoNumDenT2 *big.Int
	tDen        *big.Int
}

// NewDiscreteGaussian returns the sampler of N_Z(0, sigma2).
func NewDiscreteGaussian(sigma2 *big.Rat) (*DiscreteGaussian, error) {
	if sigma2 == nil || sigma2.Sign() <= 0 {
		return nil, invalidf("discrete Gaussian: variance %v, want > 0", sigma2)
	}
	num, den := new(big.Int).Set(sigma2.Num()), new(big.Int).Set(sigma2.Denom())
	// floor(sqrt(x)) = isqrt(floor(x)) for x >= 0.
	t := new(big.Int).Sqrt(new(big.Int).Quo(num, den))
	t.Add(t, big.NewInt(1))
	g := &DiscreteGaussian{num: num, den: den, t: t}
	t2 := new(big.Int).Mul(t, t)
	g.twoNumDenT2 = new(big.Int).Mul(new(big.Int).Lsh(num, 1), new(big.Int).Mul(den, t2))
	g.tDen = new(big.Int).Mul(t, den)
	return g, nil
}

// bits is a source of uniform random bits with scratch integers, so that a
// sample allocates only its result.
type bits struct {
	g             *mrand.ChaCha8
	buf           []byte
	r, den, q, rm *big.Int
	one           *big.Int
}

func newBits(g *mrand.ChaCha8) *bits {
	return &bits{g: g, r: new(big.Int), den: new(big.Int), q: new(big.Int), rm: new(big.Int), one: big.NewInt(1)}
}

// uniform sets z to a uniform integer in [0, n), n > 0, by rejection, and
// returns it.
func (b *bits) uniform(z, n *big.Int) *big.Int {
	if n.IsUint64() {
		return z.SetUint64(uniform64(b.g, n.Uint64()))
	}
	nb := n.BitLen()
	nbytes := (nb + 7) / 8
	if cap(b.buf) < nbytes+8 {
		b.buf = make([]byte, nbytes+8)
	}
	buf := b.buf[:nbytes]
	for {
		for i := 0; i < nbytes; i += 8 {
			binary.LittleEndian.PutUint64(b.buf[i:i+8], b.g.Uint64())
		}
		// Keep exactly nb bits: rejection then succeeds with probability > 1/2.
		buf[0] &= byte(0xff >> (8*nbytes - nb))
		z.SetBytes(buf)
		if z.Cmp(n) < 0 {
			return z
		}
	}
}

// uniform64 returns a uniform integer in [0, n), n > 0, by rejection.
func uniform64(g *mrand.ChaCha8, n uint64) uint64 {
	// [lim, 2^64) holds a whole number of copies of [0, n), lim = 2^64 mod n.
	lim := -n % n
	for {
		if x := g.Uint64(); x >= lim {
			return x % n
		}
	}
}

// bernoulli returns true with probability num/den (0 <= num <= den).
func (b *bits) bernoulli(num, den *big.Int) bool {
	return b.uniform(b.r, den).Cmp(num) < 0
}

// bernoulliExp1 returns true with probability exp(-num/den) for
// 0 <= num <= den (CKS Algorithm 1, gamma <= 1): the parity of the first
// k with a failed Bernoulli(gamma/k).
func (b *bits) bernoulliExp1(num, den *big.Int) bool {
	if num.IsUint64() && den.IsUint64() && den.Uint64() < 1<<40 {
		// Small case without big arithmetic: den k < 2^64 for k < 2^24,
		// and k beyond a few dozen has probability below 1/k!.
		nu, du := num.Uint64(), den.Uint64()
		for k := uint64(1); k < 1<<24; k++ {
			if uniform64(b.g, du*k) >= nu {
				return k%2 == 1
			}
		}
	}
	for k := int64(1); ; k++ {
		b.den.Mul(den, b.q.SetInt64(k))
		if !b.bernoulli(num, b.den) {
			return k%2 == 1
		}
	}
}

// bernoulliExp returns true with probability exp(-num/den), num >= 0,
// den > 0 (CKS Algorithm 1).
func (b *bits) bernoulliExp(num, den *big.Int) bool {
	if num.Cmp(den) <= 0 {
		return b.bernoulliExp1(num, den)
	}
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	for i := new(big.Int); i.Cmp(q) < 0; i.Add(i, b.one) {
		if !b.bernoulliExp1(b.one, b.one) {
			return false
		}
	}
	return b.bernoulliExp1(r, den)
}

// laplace sets x to a sample of the discrete Laplace distribution with
// scale t, P(x) proportional to exp(-|x|/t) (CKS Algorithm 2, t an
// integer), and returns it.
func (b *bits) laplace(x, u, t *big.Int) *big.Int {
	for {
		b.uniform(u, t)
		if !b.bernoulliExp1(u, t) {
			continue
		}
		v := int64(0)
		for b.bernoulliExp1(b.one, b.one) {
			v++
		}
		x.Mul(t, b.rm.SetInt64(v))
		x.Add(x, u)
		neg := b.g.Uint64()&1 == 1
		if neg && x.Sign() == 0 {
			continue
		}
		if neg {
			x.Neg(x)
		}
		return x
	}
}

// Sample returns one draw of N_Z(0, sigma^2) using the bits of g (CKS
// Algorithm 3).
func (dg *DiscreteGaussian) Sample(g *mrand.ChaCha8) *big.Int {
	return dg.sample(newBits(g), new(big.Int), new(big.Int), new(big.Int))
}

func (dg *DiscreteGaussian) sample(b *bits, y, u, a *big.Int) *big.Int {
	for {
		b.laplace(y, u, dg.t)
		// Accept with probability exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)).
		a.Abs(y)
		a.Mul(a, dg.tDen)
		a.Sub(a, dg.num)
		a.Mul(a, a)
		if b.bernoulliExp(a, dg.twoNumDenT2) {
			return y
		}
	}
}

// Fill sets dst[i] to independent draws of N_Z(0, sigma^2), reusing the
// integers already in dst.
func (dg *DiscreteGaussian) Fill(g *mrand.ChaCha8, dst []*big.Int) {
	b := newBits(g)
	u, a := new(big.Int), new(big.Int)
	for i := range dst {
		if dst[i] == nil {
			dst[i] = new(big.Int)
		}
		dg.sample(b, dst[i], u, a)
	}
}

// ExactRows streams rows z_1, z_2, ..., z_m of independent N_Z(0, sigma^2)
// noise in Z^d for an exact (integer) release. Row j is drawn from a
// ChaCha8 stream keyed by a one-way SHA-256 chain started at the seed (as
// for Source, under its own domain), so the state after row j holds only the
// chain value of row j+1: it determines all future rows and none of the
// past ones. A restored state redraws exactly the rows a crash interrupted.
type ExactRows struct {
	dg     *DiscreteGaussian
	sigma2 *big.Rat
	m, d   int
	step   int
	chain  key
	g      *mrand.ChaCha8
}

// NewExactRows returns a stream of m rows of dimension d of N_Z(0, sigma2);
// seed is nil for a key from crypto/rand (required for privacy) or 32
// bytes for reproducible tests.
func NewExactRows(m, d int, sigma2 *big.Rat, seed *dpcore.Seed) (*ExactRows, error) {
	if m <= 0 || d <= 0 {
		return nil, invalidf("exact rows: m = %d and d = %d must be positive", m, d)
	}
	dg, err := NewDiscreteGaussian(sigma2)
	if err != nil {
		return nil, err
	}
	k, err := newSeed(seed)
	if err != nil {
		return nil, err
	}
	return &ExactRows{dg: dg, sigma2: new(big.Rat).Set(sigma2), m: m, d: d, chain: hashKey("dpmf/exact/v1/seed", k, 0), g: mrand.NewChaCha8(key{})}, nil
}

// Next fills dst (length d) with the next row.
func (s *ExactRows) Next(dst []*big.Int) error {
	if len(dst) != s.d {
		return invalidf("exact rows: dst has length %d, want d = %d", len(dst), s.d)
	}
	if s.step >= s.m {
		return invalidf("exact rows: all %d rows already drawn", s.m)
	}
	s.g.Seed(hashKey("dpmf/exact/v1/row", s.chain, 0))
	s.dg.Fill(s.g, dst)
	s.chain = hashKey("dpmf/exact/v1/chain", s.chain, 0)
	s.step++
	return nil
}

// Step is the number of rows drawn.
func (s *ExactRows) Step() int { return s.step }

// The state of an ExactRows stream is an exactState in the state codec of
// package atomicfile (kind exactMagic); the builds before it wrote the same
// fields as hand-made binary after legacyExactMagic, which still restores.
const (
	exactMagic       = "dpmf-exact-rows"
	exactVersion     = 2
	legacyExactMagic = "dpmf-exact-rows\x00\x01"
)

type exactState struct {
	M        int    `msgpack:"m"`
	D        int    `msgpack:"d"`
	Step     int    `msgpack:"step"`
	Variance string `msgpack:"variance"` // big.Rat's RatString
	Chain    []byte `msgpack:"chain"`
}

// MarshalBinary returns the state: m, d, the variance, the rows drawn and
// the chain value of the next row (secret: it determines all future noise).
func (s *ExactRows) MarshalBinary() ([]byte, error) {
	return atomicfile.MarshalState(exactMagic, exactVersion, &exactState{M: s.m, D: s.d, Step: s.step,
		Variance: s.sigma2.RatString(), Chain: s.chain[:]})
}

// UnmarshalBinary restores a state of a stream with the same m, d and
// variance.
func (s *ExactRows) UnmarshalBinary(data []byte) error {
	var st exactState
	if bytes.HasPrefix(data, []byte(legacyExactMagic)) {
		r := &reader{b: data[len(legacyExactMagic):]}
		st.M, st.D, st.Step = int(r.uint64()), int(r.uint64()), int(r.uint64())
		st.Variance = r.string()
		st.Chain = r.bytes(32)
		if r.err == nil && len(r.b) != 0 {
			return invalidf("exact rows: restore: corrupt state")
		}
		if r.err != nil {
			return r.err
		}
	} else if err := atomicfile.UnmarshalState(data, exactMagic, exactVersion, &st); err != nil {
		return invalidf("exact rows: restore: not an exact-rows state: %s", atomicfile.Reason(err))
	}
	switch {
	case st.M != s.m || st.D != s.d:
		return invalidf("exact rows: restore: state has m = %d, d = %d; this stream m = %d, d = %d", st.M, st.D, s.m, s.d)
	case st.Variance != s.sigma2.RatString():
		return invalidf("exact rows: restore: state has variance %s, this stream %s", st.Variance, s.sigma2.RatString())
	case st.Step < 0 || st.Step > st.M || len(st.Chain) != 32:
		return invalidf("exact rows: restore: corrupt state")
	}
	s.step, s.chain = st.Step, key(st.Chain)
	return nil
}
