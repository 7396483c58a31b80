package noise

import (
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// Streaming noise of Toeplitz encoders (SPEC 6): W = C^-1 Z without any n x
// n matrix, drawing the same z_j as every other source (the package's
// randomness layout), so the exactness tests compare it with the dense
// C^-1 Z.

// Kinds of the Toeplitz noise sources, as reported by Source.Kind.
const (
	// KindToeplitzRing is a p-band Toeplitz encoder streamed by back
	// substitution with p-1 buffered rows of W (O(p d) memory; p = n for
	// the square root, whose coefficients never vanish).
	KindToeplitzRing = "toeplitz-ring"
	// KindBISRRing is a banded C^-1 (BISR) streamed as W_i = sum_{j<p}
	// g_j z_{i-j} with the last p-1 noise rows z in a ring (O(p d)).
	KindBISRRing = "bisr-ring"
	// KindBLTBuffers is a BLT encoder streamed with Nbuf buffers of d values:
	// W_t = z_t - sum_i Omega_i s_i, then s_i = Theta_i s_i + W_t.
	KindBLTBuffers = "blt-buffers"
)

// NewToeplitz returns the streamed gradient-space noise W = C^-1 Z of
// the Toeplitz mechanism t for a model of dimension d (see Source and
// Options; CSPRNG seed by default) in O(n) memory for the mechanism:
// no n x n matrix is formed. C = I (DP-SGD, c = (1)) is KindIndependent,
// as New streams it. A BLT keeps Nbuf buffers of d float32; a
// p-band encoder keeps p-1 rows, refused with the memory it needs when it
// exceeds opt.MemoryBudget.
func NewToeplitz(t *toeplitz.Encoder, d int, opt Options) (Source, error) {
	if t != nil && t.BLT == nil && t.InvCoef == nil && len(t.Coef) == 1 && t.Coef[0] == 1 {
		return NewIndependent(t.N, d, opt)
	}
	s, err := newToeplitzSource[float32](t, d, opt)
	if err != nil {
		return nil, err
	}
	return source32{s}, nil
}

type toeplitzSource[T floatT] struct {
	*common
	chain key
	// banded: c_1..c_{p-1} and 1/c_0, ring of the last p-1 rows of W.
	lags []float64
	inv0 float64
	ring [][]T
	// BLT: -Omega_i, Theta_i and the buffers s_i.
	negOmega, theta []float64
	bufs            [][]T
	// BISR: g_0..g_{p-1}; the ring holds the last p-1 rows of Z, and each
	// worker a chunk of scratch.
	fir     []float64
	scratch [][]T
}

func newToeplitzSource[T floatT](t *toeplitz.Encoder, d int, opt Options) (*toeplitzSource[T], error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	kind, rows := KindToeplitzRing, len(t.Coef)-1
	if t.InvCoef != nil {
		kind, rows = KindBISRRing, len(t.InvCoef)-1
	}
	if t.BLT != nil {
		kind, rows = KindBLTBuffers, t.BLT.Buffers()
	}
	c, err := newCommon[T](kind, t.N, t.N, d, opt)
	if err != nil {
		return nil, err
	}
	if mem := int64(rows)*int64(d)*int64(c.elem) + 32; opt.MemoryBudget > 0 && mem > opt.MemoryBudget {
		return nil, invalidf("%s needs %s of noise buffers (%d rows of d = %d), over the budget of %s (%w)", t.Name, dpcore.HumanBytes(float64(mem)), rows, d, dpcore.HumanBytes(float64(opt.MemoryBudget)), errOverBudget)
	}
	seed, err := newSeed(opt.Seed)
	if err != nil {
		return nil, err
	}
	var fp hasher
	fp.init()
	fp.str(kind)
	fp.int(t.N)
	s := &toeplitzSource[T]{common: c, chain: seed}
	if t.BLT != nil {
		for i, th := range t.BLT.Theta {
			s.theta = append(s.theta, th)
			s.negOmega = append(s.negOmega, -t.BLT.Omega[i])
			fp.float(th)
			fp.float(t.BLT.Omega[i])
		}
		s.bufs = make([][]T, rows)
		for i := range s.bufs {
			s.bufs[i] = make([]T, d)
		}
	} else if t.InvCoef != nil {
		s.fir = append([]float64(nil), t.InvCoef...)
		for _, v := range t.InvCoef {
			if !finiteFloat(v) {
				return nil, invalidf("%s: coefficient %v", t.Name, v)
			}
			fp.float(v)
		}
		s.ring = make([][]T, rows)
		for i := range s.ring {
			s.ring[i] = make([]T, d)
		}
		s.scratch = make([][]T, c.workers)
		for i := range s.scratch {
			s.scratch[i] = make([]T, chunkLen)
		}
	} else {
		if t.Coef[0] == 0 || !finiteFloat(t.Coef[0]) {
			return nil, invalidf("%s: singular encoder (c_0 = %v)", t.Name, t.Coef[0])
		}
		s.inv0 = 1 / t.Coef[0]
		s.lags = append([]float64(nil), t.Coef[1:]...)
		for _, v := range t.Coef {
			fp.float(v)
		}
		s.ring = make([][]T, rows)
		for i := range s.ring {
			s.ring[i] = make([]T, d)
		}
	}
	c.mech = fp.sum()
	c.plan = fingerprint(kind, rows)
	return s, nil
}

func (s *toeplitzSource[T]) base() *common { return s.common }

func (s *toeplitzSource[T]) memoryBytes() int64 {
	return int64(len(s.ring)+len(s.bufs))*int64(s.d)*int64(s.elem) + 32
}

func (s *toeplitzSource[T]) next(dst []T) error {
	if err := s.checkNext(len(dst)); err != nil {
		return err
	}
	i := s.step
	rk := rowKeyOf(s.chain)
	s.forShards(func(w, sh int) {
		lo, hi := shardRange(sh, s.d)
		out := dst[lo:hi]
		genShard(s.gens[w], rk, sh, out)
		switch {
		case s.bufs != nil:
			s.bltShard(out, lo)
		case s.fir != nil:
			s.firShard(out, lo, i, s.scratch[w])
		default:
			s.bandedShard(out, lo, i)
		}
	})
	s.chain = chainNext(s.chain)
	s.step++
	return nil
}

// bltShard turns z (in out) into W and advances the buffers, one pass over
// them per chunk.
func (s *toeplitzSource[T]) bltShard(out []T, lo int) {
	nb := len(s.bufs)
	for c0 := 0; c0 < len(out); c0 += chunkLen {
		c1 := min(c0+chunkLen, len(out))
		o := out[c0:c1]
		switch nb {
		case 1:
			bltStep1(o, s.bufs[0][lo+c0:lo+c1], T(s.negOmega[0]), T(s.theta[0]))
		case 2:
			bltStep2(o, s.bufs[0][lo+c0:lo+c1], s.bufs[1][lo+c0:lo+c1],
				T(s.negOmega[0]), T(s.negOmega[1]), T(s.theta[0]), T(s.theta[1]))
		case 3:
			bltStep3(o, s.bufs[0][lo+c0:lo+c1], s.bufs[1][lo+c0:lo+c1], s.bufs[2][lo+c0:lo+c1],
				T(s.negOmega[0]), T(s.negOmega[1]), T(s.negOmega[2]), T(s.theta[0]), T(s.theta[1]), T(s.theta[2]))
		case 4:
			bltStep4(o, s.bufs[0][lo+c0:lo+c1], s.bufs[1][lo+c0:lo+c1], s.bufs[2][lo+c0:lo+c1], s.bufs[3][lo+c0:lo+c1],
				T(s.negOmega[0]), T(s.negOmega[1]), T(s.negOmega[2]), T(s.negOmega[3]),
				T(s.theta[0]), T(s.theta[1]), T(s.theta[2]), T(s.theta[3]))
		default:
			// More than 4 buffers: two passes over the chunk (W first, then
			// the buffers), the second finding the chunk in cache.
			bs := func(i int) []T { return s.bufs[i][lo+c0 : lo+c1] }
			i := 0
			for ; i+4 <= nb; i += 4 {
				axpy4(T(s.negOmega[i]), T(s.negOmega[i+1]), T(s.negOmega[i+2]), T(s.negOmega[i+3]),
					bs(i), bs(i+1), bs(i+2), bs(i+3), o)
			}
			for ; i < nb; i++ {
				axpy(T(s.negOmega[i]), bs(i), o)
			}
			for i, b := range s.bufs {
				bb := b[lo+c0 : lo+c1]
				th := T(s.theta[i])
				for q, v := range o {
					bb[q] = th*bb[q] + v
				}
			}
		}
	}
}

func bltStep1[T floatT](o, b0 []T, w0, t0 T) {
	b0 = b0[:len(o)]
	for q, z := range o {
		v := z + w0*b0[q]
		b0[q] = t0*b0[q] + v
		o[q] = v
	}
}

func bltStep2[T floatT](o, b0, b1 []T, w0, w1, t0, t1 T) {
	b0, b1 = b0[:len(o)], b1[:len(o)]
	for q, z := range o {
		x0, x1 := b0[q], b1[q]
		v := z + w0*x0 + w1*x1
		b0[q], b1[q] = t0*x0+v, t1*x1+v
		o[q] = v
	}
}

func bltStep3[T floatT](o, b0, b1, b2 []T, w0, w1, w2, t0, t1, t2 T) {
	b0, b1, b2 = b0[:len(o)], b1[:len(o)], b2[:len(o)]
	for q, z := range o {
		x0, x1, x2 := b0[q], b1[q], b2[q]
		v := z + w0*x0 + w1*x1 + w2*x2
		b0[q], b1[q], b2[q] = t0*x0+v, t1*x1+v, t2*x2+v
		o[q] = v
	}
}

func bltStep4[T floatT](o, b0, b1, b2, b3 []T, w0, w1, w2, w3, t0, t1, t2, t3 T) {
	b0, b1, b2, b3 = b0[:len(o)], b1[:len(o)], b2[:len(o)], b3[:len(o)]
	for q, z := range o {
		x0, x1, x2, x3 := b0[q], b1[q], b2[q], b3[q]
		v := z + w0*x0 + w1*x1 + w2*x2 + w3*x3
		b0[q], b1[q], b2[q], b3[q] = t0*x0+v, t1*x1+v, t2*x2+v, t3*x3+v
		o[q] = v
	}
}

// firShard turns z_i (in out) into W_i = sum_j g_j z_{i-j} and stores z_i
// in the ring slot of z_{i-p+1}, read here for the last time.
func (s *toeplitzSource[T]) firShard(out []T, lo, i int, tmp []T) {
	nb := len(s.ring)
	nl := min(nb, i)
	for c0 := 0; c0 < len(out); c0 += chunkLen {
		c1 := min(c0+chunkLen, len(out))
		o, acc := out[c0:c1], tmp[:c1-c0]
		g0 := T(s.fir[0])
		for q, z := range o {
			acc[q] = g0 * z
		}
		src := func(l int) []T { return s.ring[(i-l)%nb][lo+c0 : lo+c1] }
		k := 1
		for ; k+3 <= nl; k += 4 {
			axpy4(T(s.fir[k]), T(s.fir[k+1]), T(s.fir[k+2]), T(s.fir[k+3]), src(k), src(k+1), src(k+2), src(k+3), acc)
		}
		for ; k <= nl; k++ {
			axpy(T(s.fir[k]), src(k), acc)
		}
		if nb > 0 {
			copy(s.ring[i%nb][lo+c0:lo+c1], o)
		}
		copy(o, acc)
	}
}

// bandedShard is back substitution W_i = (z_i - sum_l c_l W_{i-l}) / c_0.
func (s *toeplitzSource[T]) bandedShard(out []T, lo, i int) {
	nb := len(s.ring)
	inv := T(s.inv0)
	nl := min(len(s.lags), i)
	for c0 := 0; c0 < len(out); c0 += chunkLen {
		c1 := min(c0+chunkLen, len(out))
		o := out[c0:c1]
		src := func(l int) []T { return s.ring[(i-l)%nb][lo+c0 : lo+c1] }
		k := 0
		for ; k+4 <= nl; k += 4 {
			axpy4(T(-s.lags[k]), T(-s.lags[k+1]), T(-s.lags[k+2]), T(-s.lags[k+3]),
				src(k+1), src(k+2), src(k+3), src(k+4), o)
		}
		for ; k < nl; k++ {
			axpy(T(-s.lags[k]), src(k+1), o)
		}
		if inv != 1 {
			for q := range o {
				o[q] *= inv
			}
		}
	}
	if nb > 0 {
		copy(s.ring[i%nb][lo:lo+len(out)], out)
	}
}

func (s *toeplitzSource[T]) appendState(b []byte) []byte {
	b = append(b, s.chain[:]...)
	for _, buf := range s.bufs {
		b = appendFloats(b, buf)
	}
	nb := len(s.ring)
	for r := max(0, s.step-nb); r < s.step; r++ {
		b = appendFloats(b, s.ring[r%nb])
	}
	return b
}

func (s *toeplitzSource[T]) stateSize(step int) int {
	return 32 + (len(s.bufs)+min(step, len(s.ring)))*s.d*s.elem
}

func (s *toeplitzSource[T]) restoreState(r *reader) error {
	s.chain = r.key()
	for _, buf := range s.bufs {
		readFloats(r, buf)
	}
	nb := len(s.ring)
	for q := max(0, s.step-nb); q < s.step; q++ {
		readFloats(r, s.ring[q%nb])
	}
	return r.err
}
