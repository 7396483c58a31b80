package noise

import (
	"math"

	"github.com/dpmf-go/dpmf/mfnoise"
	"gonum.org/v1/gonum/mat"
)

// recurSource streams W = C^-1 Z for a square lower-triangular C by back
// substitution (banded-MF App. J): W_i = (z_i - sum_{l>=1} C[i,i-l] W_{i-l})
// / C[i,i], keeping the last b-1 rows of W in a ring, b the bandwidth of C
// (C[i,j] = 0 for i - j >= b). DP-SGD is the case C = I (b = 1, no ring).
type recurSource[T floatT] struct {
	*common
	chain key     // chain value of the next noise row
	ring  [][]T   // W_{i-1}, ..., W_{i-b+1} in slots i mod (b-1)
	lags  [][]lag // per row: the nonzero C[i,i-l], l >= 1
	inv   []float64
	unit  bool // C = I: no scaling
}

type lag struct {
	l int
	c float64
}

// chunkLen is the number of coordinates combined at a time, sized so the
// output chunk stays in L1 while the buffered rows stream through.
const chunkLen = 2048

func newIndependent[T floatT](n, d int, opt Options) (*recurSource[T], error) {
	c, err := newCommon[T](KindIndependent, n, n, d, opt)
	if err != nil {
		return nil, err
	}
	seed, err := newSeed(opt.Seed)
	if err != nil {
		return nil, err
	}
	c.mech = fingerprint("independent", n)
	c.plan = fingerprint(KindIndependent)
	s := &recurSource[T]{common: c, chain: seed, unit: true}
	return s, nil
}

func newRecursion[T floatT](cm *mat.Dense, d int, opt Options) (*recurSource[T], error) {
	n, _ := cm.Dims()
	return newRecursionFrom[T](n, n, cm.At, mfnoise.StructuralZeroCutoff(cm), d, opt)
}

// newBandedRecursion is newRecursion for an encoder held by its band
// (mfnoise.BandedEncoder), O(n Bands) coefficients: the same lags, noise
// and fingerprint as the dense encoder's, without the n x n matrix.
func newBandedRecursion[T floatT](e *mfnoise.BandedEncoder, d int, opt Options) (*recurSource[T], error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	mx := 0.0
	for _, v := range e.Band {
		mx = max(mx, math.Abs(v))
	}
	return newRecursionFrom[T](e.N, e.Bands, e.At, mfnoise.StructuralZeroTol*mx, d, opt)
}

// newRecursionFrom is the recursion of the n x n lower-triangular encoder
// at(i, j), zero at i-j >= bands, with entries of magnitude at most tol
// taken as structural zeros.
func newRecursionFrom[T floatT](n, bands int, at func(i, j int) float64, tol float64, d int, opt Options) (*recurSource[T], error) {
	lags := make([][]lag, n)
	inv := make([]float64, n)
	b := 1
	var fp hasher
	fp.init()
	fp.str("recursion")
	fp.int(n)
	for i := range n {
		cii := at(i, i)
		if math.Abs(cii) <= tol || math.IsNaN(cii) {
			return nil, invalidf("encoder is singular (C[%d,%d] = %g)", i+1, i+1, cii)
		}
		inv[i] = 1 / cii
		fp.int(i)
		fp.float(cii)
		for j := max(0, i-bands+1); j < i; j++ {
			if v := at(i, j); math.Abs(v) > tol {
				lags[i] = append(lags[i], lag{i - j, v})
				b = max(b, i-j+1)
				fp.int(j)
				fp.float(v)
			}
		}
	}
	kind := KindBanded
	if b == n && n > 1 {
		kind = KindDenseStored
	}
	c, err := newCommon[T](kind, n, n, d, opt)
	if err != nil {
		return nil, err
	}
	if mem := int64(b-1)*int64(d)*int64(c.elem) + 32; opt.MemoryBudget > 0 && mem > opt.MemoryBudget {
		return nil, errOverBudget
	}
	seed, err := newSeed(opt.Seed)
	if err != nil {
		return nil, err
	}
	c.mech = fp.sum()
	c.plan = fingerprint(kind, b)
	s := &recurSource[T]{common: c, chain: seed, lags: lags, inv: inv}
	s.ring = make([][]T, b-1)
	for k := range s.ring {
		s.ring[k] = make([]T, d)
	}
	return s, nil
}

func (s *recurSource[T]) base() *common { return s.common }

func (s *recurSource[T]) memoryBytes() int64 {
	return int64(len(s.ring))*int64(s.d)*int64(s.elem) + 32
}

func (s *recurSource[T]) next(dst []T) error {
	if err := s.checkNext(len(dst)); err != nil {
		return err
	}
	i := s.step
	rk := rowKeyOf(s.chain)
	var lags []lag
	if !s.unit {
		lags = s.lags[i]
	}
	nb := len(s.ring)
	s.forShards(func(w, sh int) {
		lo, hi := shardRange(sh, s.d)
		out := dst[lo:hi]
		genShard(s.gens[w], rk, sh, out)
		if s.unit {
			return
		}
		inv := T(s.inv[i])
		for c0 := 0; c0 < len(out); c0 += chunkLen {
			c1 := min(c0+chunkLen, len(out))
			o := out[c0:c1]
			src := func(l int) []T { return s.ring[(i-l)%nb][lo+c0 : lo+c1] }
			k := 0
			for ; k+4 <= len(lags); k += 4 {
				axpy4(T(-lags[k].c), T(-lags[k+1].c), T(-lags[k+2].c), T(-lags[k+3].c),
					src(lags[k].l), src(lags[k+1].l), src(lags[k+2].l), src(lags[k+3].l), o)
			}
			for ; k < len(lags); k++ {
				axpy(T(-lags[k].c), src(lags[k].l), o)
			}
			if inv != 1 {
				for q := range o {
					o[q] *= inv
				}
			}
		}
		// Slot i mod (b-1) held W_{i-b+1}, read above for the last time.
		if nb > 0 {
			copy(s.ring[i%nb][lo:hi], out)
		}
	})
	s.chain = chainNext(s.chain)
	s.step++
	return nil
}

// axpy is y += a x.
func axpy[T floatT](a T, x, y []T) {
	x = x[:len(y)]
	for k := range y {
		y[k] += a * x[k]
	}
}

// axpy4 is y += a x + b u + c v + e w, one pass over y for four rows.
func axpy4[T floatT](a, b, c, e T, x, u, v, w, y []T) {
	x, u, v, w = x[:len(y)], u[:len(y)], v[:len(y)], w[:len(y)]
	if y32, ok := any(y).([]float32); ok && useAVX2 {
		axpy4AVX2(float32(a), float32(b), float32(c), float32(e),
			any(x).([]float32), any(u).([]float32), any(v).([]float32), any(w).([]float32), y32)
		return
	}
	axpy4Go(a, b, c, e, x, u, v, w, y)
}

// axpy4Go is the portable axpy4.
func axpy4Go[T floatT](a, b, c, e T, x, u, v, w, y []T) {
	x, u, v, w = x[:len(y)], u[:len(y)], v[:len(y)], w[:len(y)]
	for k := range y {
		y[k] += a*x[k] + b*u[k] + c*v[k] + e*w[k]
	}
}

func (s *recurSource[T]) appendState(b []byte) []byte {
	b = append(b, s.chain[:]...)
	nb := len(s.ring)
	for r := max(0, s.step-nb); r < s.step; r++ {
		b = appendFloats(b, s.ring[r%nb])
	}
	return b
}

func (s *recurSource[T]) stateSize(step int) int {
	return 32 + min(step, len(s.ring))*s.d*s.elem
}

func (s *recurSource[T]) restoreState(r *reader) error {
	s.chain = r.key()
	nb := len(s.ring)
	for q := max(0, s.step-nb); q < s.step; q++ {
		readFloats(r, s.ring[q%nb])
	}
	return r.err
}
