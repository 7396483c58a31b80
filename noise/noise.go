package noise

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
	"gonum.org/v1/gonum/mat"
)

// Source yields the gradient-space noise W_i of a factorization one
// step at a time (SPEC 6): W = A^-1 B Z, which is C^-1 Z for a square
// lower-triangular encoder and C^+ Z for a tall encoder with the optimal
// decoder. The noise has unit scale: the trainer multiplies it by
// sigma * clip norm * sensitivity.
//
// A Source is not safe for concurrent use; Next itself uses the
// configured number of worker goroutines.
type Source interface {
	// Next fills dst (len(dst) == Dim()) with the next step's W_i. It
	// returns an error past step N or for a wrong length.
	Next(dst []float32) error
	// Step is the number of steps already produced.
	Step() int
	// N is the number of steps of the mechanism.
	N() int
	// Dim is the model dimension d.
	Dim() int
	// MemoryBytes is the number of bytes of per-step state held: the
	// d-sized buffers, per-worker scratch and noise keys. The mechanism's
	// own coefficients (at most the nonzeros of C or of G = A^-1 B, kept
	// as a step program) are not counted: they do not grow with d.
	MemoryBytes() int64
	// Kind names the streaming method, one of the Kind* constants.
	Kind() string
	// MarshalBinary returns the complete state: step, buffers, generator
	// keys and a fingerprint of the mechanism, d and the memory plan. The
	// state determines all remaining noise (and holds past noise rows the
	// mechanism still needs): keep it as secret as the seed. It does not
	// hold the keys of noise rows no longer needed, so it cannot be used
	// to recompute the noise of steps already released beyond that.
	MarshalBinary() ([]byte, error)
	// UnmarshalBinary restores a state produced by MarshalBinary into a
	// source built for the same mechanism, d and memory plan, and returns
	// an error otherwise.
	UnmarshalBinary(data []byte) error
}

// Kinds of noise source, as reported by Source.Kind.
const (
	// KindIndependent is DP-SGD: W_i = z_i. No state.
	KindIndependent = "independent"
	// KindBanded is a lower-triangular b-banded encoder streamed by back
	// substitution with b-1 buffered rows (O(b d) memory). Block-diagonal
	// (stamped) encoders use it with b the block size.
	KindBanded = "banded"
	// KindDenseStored is a dense lower-triangular encoder streamed by back
	// substitution over all previous rows (O(n d) memory).
	KindDenseStored = "dense-stored"
	// KindDenseRegenerate is a square lower-triangular encoder streamed as
	// W_i = sum_j (C^-1)[i,j] z_j, regenerating every z_j from its key on
	// each use (O(d) memory, O(i d) time on step i).
	KindDenseRegenerate = "dense-regenerate"
	// KindSparseLive streams W_i = sum_j G[i,j] z_j with G = A^-1 B sparse,
	// keeping each z_j only between its first and last use (O(d log n)
	// for a binary tree with a decoder that uses only the dyadic nodes).
	KindSparseLive = "sparse-live"
	// KindTallPregenerated is KindSparseLive when every z_j is needed from
	// the first step on but G is not dense enough for KindTallBlocked: all
	// m rows of Z are held (O(m d) memory).
	KindTallPregenerated = "tall-pregenerated"
	// KindTallRegenerate streams a general G regenerating each z_j on every
	// use (O(d) memory, O(nnz(G[i,:]) d) time on step i).
	KindTallRegenerate = "tall-regenerate"
	// KindLiveRegenerate stores the short-lived z_j within the memory
	// budget and regenerates the others on every use.
	KindLiveRegenerate = "live-regenerate"
	// KindTallBlocked streams a dense G (optimal decoders of trees and
	// FFT) by computing T steps at a time with a matrix product, drawing
	// each z_j once per block (O(T d) memory, m d / T draws per step; T =
	// 64 with no budget, else the largest power of two up to 256 that
	// fits).
	KindTallBlocked = "tall-blocked"
	// KindDenseBlocked is KindTallBlocked for G = C^-1 of a dense
	// lower-triangular encoder whose stored rows do not fit.
	KindDenseBlocked = "dense-blocked"
)

// Options configures a noise source. The zero value is a crypto/rand
// seed, no memory limit and GOMAXPROCS workers.
//
// Randomness layout (fixed, so any z_j can be regenerated and every method
// draws the same Z): noise row j has a key from a one-way SHA-256 chain
// started at the seed; coordinates are cut into shards of 32768, and shard
// s of row j is a ChaCha8 stream seeded with SHA-256(key_j, s), turned into
// normals by an exact 256-layer ziggurat. Shards are independent, so the
// workers split them without changing the noise.
type Options struct {
	// Seed is nil for a seed from crypto/rand (the default, required for
	// privacy), or a seed for reproducible experiments. With a fixed seed
	// the noise is public knowledge to anyone who has the seed.
	Seed *dpcore.Seed
	// MemoryBudget bounds MemoryBytes; 0 means no limit. When the fastest
	// method does not fit, a slower one that regenerates noise is chosen.
	MemoryBudget int64
	// Workers is the number of goroutines generating noise; 0 means
	// GOMAXPROCS. The noise does not depend on it. Under a MemoryBudget
	// the memory plan can (per-worker scratch counts against the budget),
	// and a checkpoint restores only into a source with the same plan.
	Workers int
}

// NewIndependent returns DP-SGD noise: n steps of i.i.d. N(0,1) vectors
// of length d.
func NewIndependent(n, d int, opt Options) (Source, error) {
	s, err := newIndependent[float32](n, d, opt)
	if err != nil {
		return nil, err
	}
	return source32{s}, nil
}

// New returns a streaming source of the gradient-space noise of strategy st
// for a model of dimension d, choosing the method from the structure of the
// encoder and decoder and opt.MemoryBudget:
//   - C = I: KindIndependent;
//   - square lower-triangular C with bandwidth b: back substitution with b-1
//     buffered rows (KindBanded, KindDenseStored when b = n) if it fits the
//     budget, else regeneration (KindDenseRegenerate or KindLiveRegenerate);
//   - any other encoder (tall trees, FFT, stamps of them): W_i = sum_j
//     G[i,j] z_j with G = A^-1 B. Dense G (optimal decoders): T steps at a
//     time by a matrix product (KindTallBlocked). Sparse G (online
//     decoders, stamps): each z_j held between its first and last use
//     within the budget (KindSparseLive, KindTallPregenerated),
//     regenerating the rest (KindLiveRegenerate, KindTallRegenerate); held
//     rows whose remaining columns of G are proportional are merged into
//     one buffer, which gives O(d log n) memory for binary trees with the
//     online decoders (plain or Honaker-weighted) and one block's worth
//     for stamped mechanisms.
//   - a dense C^-1 whose back substitution does not fit the budget is
//     streamed like a dense G (KindDenseBlocked), or regenerated;
//   - a factorization made by Toeplitz.Factorization: the Toeplitz
//     mechanism's own source (KindToeplitzRing, KindBLTBuffers).
//
// All methods draw the same z_j (see the package's randomness layout) and
// agree to rounding.
//
// A^-1 B is computed in O(n m) from the factored inverse of the workload.
// Building the source costs O(nnz(G)) beyond that (O(n m) for dense G).
//
// New dispatches on the strategy: a Toeplitz strategy
// (*toeplitz.Strategy) is streamed by NewToeplitz in O(n) memory at
// any n; a banded one (*mfnoise.BandedStrategy) by back substitution
// over its band (KindBanded, O(Bands d) memory) at any n, drawing the same
// noise as its dense factorization; a dense one (*mfnoise.Factorization)
// as above.
func New(st dpcore.Strategy, d int, opt Options) (Source, error) {
	if t, ok := st.(*toeplitz.Strategy); ok {
		return NewToeplitz(t.Encoder, d, opt)
	}
	if b, ok := st.(*mfnoise.BandedStrategy); ok {
		s, err := newBandedRecursion[float32](b.Encoder, d, opt)
		if errors.Is(err, errOverBudget) {
			return nil, invalidf("bandmf:%d: %d buffered noise rows of %d coordinates need %s, over the memory budget of %s",
				b.Encoder.Bands, b.Encoder.Bands-1, d, dpcore.HumanBytes(float64(b.Encoder.Bands-1)*float64(d)*4), dpcore.HumanBytes(float64(opt.MemoryBudget)))
		}
		if err != nil {
			return nil, fmt.Errorf("noise: bandmf:%d: %w", b.Encoder.Bands, err)
		}
		return source32{s}, nil
	}
	f, err := mfnoise.Dense(st)
	if err != nil {
		return nil, fmt.Errorf("noise: %w", err)
	}
	s, err := newNoiseSource[float32](f, d, opt)
	if err != nil {
		return nil, err
	}
	return source32{s}, nil
}

// streamer is a noise source over element type T (float32 for training,
// float64 for the exactness tests).
type streamer[T floatT] interface {
	base() *common
	next(dst []T) error
	memoryBytes() int64
	appendState(b []byte) []byte
	stateSize(step int) int       // bytes appendState writes at that step
	restoreState(r *reader) error // after base().step is set
}

// source32 adapts a float32 streamer to Source.
type source32 struct{ s streamer[float32] }

func (s source32) Next(dst []float32) error { return s.s.next(dst) }
func (s source32) Step() int                { return s.s.base().step }
func (s source32) N() int                   { return s.s.base().n }
func (s source32) Dim() int                 { return s.s.base().d }
func (s source32) MemoryBytes() int64       { return s.s.memoryBytes() }
func (s source32) Kind() string             { return s.s.base().kind }
func (s source32) MarshalBinary() ([]byte, error) {
	return marshalStreamer(s.s)
}
func (s source32) UnmarshalBinary(data []byte) error { return unmarshalStreamer(s.s, data) }

// common holds what every source kind shares.
type common struct {
	kind    string
	n, m, d int
	step    int
	workers int
	elem    int      // bytes per element of T
	mech    [32]byte // fingerprint of the mechanism (C or G after zeroing)
	plan    [32]byte // fingerprint of the memory plan
	gens    []*mrand.ChaCha8
}

func newCommon[T floatT](kind string, n, m, d int, opt Options) (*common, error) {
	if n <= 0 || d <= 0 {
		return nil, invalidf("n = %d and d = %d must be positive", n, d)
	}
	if opt.MemoryBudget < 0 || opt.Workers < 0 {
		return nil, invalidf("memory budget %d and workers %d must be non-negative", opt.MemoryBudget, opt.Workers)
	}
	w := opt.Workers
	if w == 0 {
		w = runtime.GOMAXPROCS(0)
	}
	w = max(1, min(w, numShards(d)))
	c := &common{kind: kind, n: n, m: m, d: d, workers: w, elem: elemSize[T]()}
	c.gens = make([]*mrand.ChaCha8, w)
	for i := range c.gens {
		c.gens[i] = mrand.NewChaCha8(key{})
	}
	return c, nil
}

func elemSize[T floatT]() int {
	var x T
	if _, ok := any(x).(float32); ok {
		return 4
	}
	return 8
}

func (c *common) checkNext(dlen int) error {
	if dlen != c.d {
		return invalidf("dst has length %d, want d = %d", dlen, c.d)
	}
	if c.step >= c.n {
		return fmt.Errorf("noise: %w: all %d steps already produced", ErrExhausted, c.n)
	}
	return nil
}

// ErrExhausted is wrapped by Next when all N steps have been produced.
var ErrExhausted = errors.New("noise source exhausted")

// forShards runs fn(worker, shard) over every shard of the d coordinates on
// the configured workers. Shards are processed independently, so the result
// does not depend on the number of workers.
func (c *common) forShards(fn func(w, s int)) {
	ns := numShards(c.d)
	if c.workers == 1 || ns == 1 {
		for s := range ns {
			fn(0, s)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range c.workers {
		wg.Go(func() {
			for {
				s := int(next.Add(1) - 1)
				if s >= ns {
					return
				}
				fn(w, s)
			}
		})
	}
	wg.Wait()
}

// newNoiseSource picks the method for f (see New).
func newNoiseSource[T floatT](f *mfnoise.Factorization, d int, opt Options) (streamer[T], error) {
	if f == nil || f.Encoder == nil || f.Decoder == nil {
		return nil, invalidf("nil factorization")
	}
	if f.Toeplitz() != nil {
		s, err := newToeplitzSource[T](f.Toeplitz(), d, opt)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errOverBudget) {
			return nil, err
		}
		// Over the budget (the square root's n-1 rows): the generic
		// methods below can regenerate instead.
	}
	c := f.Encoder
	m, n := c.Dims()
	if n != f.N() || m < n {
		return nil, invalidf("encoder is %d x %d for a workload of %d steps", m, n, f.N())
	}
	if br, bc := f.Decoder.Dims(); br != n || bc != m {
		return nil, invalidf("decoder is %d x %d, want %d x %d", br, bc, n, m)
	}
	// NaN would pass every structural-zero test below and vanish silently.
	if err := checkFinite("encoder", c); err != nil {
		return nil, err
	}
	if err := checkFinite("decoder", f.Decoder); err != nil {
		return nil, err
	}
	if m == n && isLowerTriangular(c) {
		if isIdentity(c) {
			return newIndependent[T](n, d, opt)
		}
		s, err := newRecursion[T](c, d, opt)
		if err == nil || !errors.Is(err, errOverBudget) {
			return s, err
		}
		// Back substitution does not fit: regenerate from G = C^-1.
		var inv mat.TriDense
		if err := inv.InverseTri(mat.NewTriDense(n, mat.Lower, lowerData(c))); err != nil {
			return nil, fmt.Errorf("noise: inverting the encoder: %w", err)
		}
		return newLive[T](mat.DenseCopyOf(&inv), true, d, opt)
	}
	g, err := workloadSolve(f.Workload, f.Decoder)
	if err != nil {
		return nil, err
	}
	return newLive[T](g, false, d, opt)
}

// workloadSolve returns A^-1 B in O(n m) from the factored inverse of the
// workload (SPEC 2): S^-1 is the first difference, and for momentum
// A = M_eta M_beta = S diag(eta) M_beta, so A^-1 = M_beta^-1 diag(1/eta)
// S^-1 with M_beta^-1 = I - beta * (shift down by one).
func workloadSolve(w dpcore.Workload, b *mat.Dense) (*mat.Dense, error) {
	if err := w.Validate(); err != nil {
		return nil, err // already says what is wrong with the workload
	}
	n := w.N
	g := mat.DenseCopyOf(b)
	diffRows := func(beta float64) { // row i -= beta * row i-1, bottom up
		for i := n - 1; i >= 1; i-- {
			r, p := g.RawRowView(i), g.RawRowView(i-1)
			for k := range r {
				r[k] -= beta * p[k]
			}
		}
	}
	diffRows(1)
	switch w.Kind {
	case dpcore.PrefixSumKind:
	case dpcore.MomentumKind:
		eta, err := w.Schedule.Rates(n)
		if err != nil {
			return nil, err
		}
		for i, e := range eta {
			if e == 0 {
				return nil, invalidf("workload A is singular (learning rate %d is 0)", i+1)
			}
			r := g.RawRowView(i)
			for k := range r {
				r[k] /= e
			}
		}
		if w.Momentum != 0 {
			diffRows(w.Momentum)
		}
	default:
		return nil, invalidf("workload kind %q", w.Kind)
	}
	return g, nil
}

// lowerData copies the lower triangle of the square matrix a row-major.
func lowerData(a *mat.Dense) []float64 {
	n, _ := a.Dims()
	data := make([]float64, n*n)
	for i := range n {
		for j := 0; j <= i; j++ {
			data[i*n+j] = a.At(i, j)
		}
	}
	return data
}

func maxAbs(a mat.Matrix) float64 {
	r, c := a.Dims()
	mx := 0.0
	for i := range r {
		for j := range c {
			mx = max(mx, math.Abs(a.At(i, j)))
		}
	}
	return mx
}

func isLowerTriangular(c *mat.Dense) bool {
	n, _ := c.Dims()
	tol := mfnoise.StructuralZeroCutoff(c)
	for i := range n {
		for j := i + 1; j < n; j++ {
			if math.Abs(c.At(i, j)) > tol {
				return false
			}
		}
	}
	return true
}

// isIdentity reports whether c is exactly I (DP-SGD's encoder).
func isIdentity(c *mat.Dense) bool {
	n, _ := c.Dims()
	for i := range n {
		for j := range n {
			want := 0.0
			if i == j {
				want = 1
			}
			if c.At(i, j) != want {
				return false
			}
		}
	}
	return true
}

var errOverBudget = errors.New("over memory budget")

// fingerprint hashes small descriptions (kinds, plans).
func fingerprint(parts ...any) [32]byte {
	var h hasher
	h.init()
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			h.str(v)
		case int:
			h.int(v)
		default:
			panic(fmt.Sprintf("fingerprint: %T", p))
		}
	}
	return h.sum()
}

// hasher streams mechanism coefficients into SHA-256 without holding them.
type hasher struct {
	h   hash.Hash
	buf [8]byte
}

func (h *hasher) init() { h.h = sha256.New() }

func (h *hasher) int(v int) {
	binary.LittleEndian.PutUint64(h.buf[:], uint64(v))
	h.h.Write(h.buf[:])
}

func (h *hasher) float(v float64) {
	binary.LittleEndian.PutUint64(h.buf[:], math.Float64bits(v))
	h.h.Write(h.buf[:])
}

func (h *hasher) str(v string) {
	h.int(len(v))
	h.h.Write([]byte(v))
}

func (h *hasher) sum() [32]byte {
	var out [32]byte
	h.h.Sum(out[:0])
	return out
}

// A source's state is a sourceState in the state codec of package
// atomicfile (kind stateMagic, format stateVersion). The builds before it
// wrote the same fields as hand-made binary after legacyStateMagic (whose
// name keeps the package the sources came from, mfnoise); such states, in
// older checkpoints, still restore.
const (
	stateMagic       = "dpmf-noise-source"
	stateVersion     = 2
	legacyStateMagic = "mfnoise-source\x00\x01"
)

// sourceState is the header of a source's state (kind, n, m, d, element
// size, step, fingerprints of the mechanism and of the memory plan) and
// the kind's buffers and generator keys (appendState).
type sourceState struct {
	Kind    string `msgpack:"kind"`
	N       int    `msgpack:"n"`
	M       int    `msgpack:"m"`
	D       int    `msgpack:"d"`
	Elem    int    `msgpack:"elem"`
	Step    int    `msgpack:"step"`
	Mech    []byte `msgpack:"mech"`
	Plan    []byte `msgpack:"plan"`
	Buffers []byte `msgpack:"buffers"`
}

func marshalStreamer[T floatT](s streamer[T]) ([]byte, error) {
	c := s.base()
	return atomicfile.MarshalState(stateMagic, stateVersion, &sourceState{
		Kind: c.kind, N: c.n, M: c.m, D: c.d, Elem: c.elem, Step: c.step,
		Mech: c.mech[:], Plan: c.plan[:], Buffers: s.appendState(nil)})
}

// readLegacyState decodes a state written before the state codec.
func readLegacyState(data []byte) (sourceState, error) {
	r := &reader{b: data[len(legacyStateMagic):]}
	st := sourceState{Kind: r.string()}
	for _, v := range []*int{&st.N, &st.M, &st.D, &st.Elem, &st.Step} {
		*v = int(r.uint64())
	}
	st.Mech = r.bytes(32)
	st.Plan = r.bytes(32)
	st.Buffers = r.b
	return st, r.err
}

func unmarshalStreamer[T floatT](s streamer[T], data []byte) error {
	c := s.base()
	var st sourceState
	if bytes.HasPrefix(data, []byte(legacyStateMagic)) {
		var err error
		if st, err = readLegacyState(data); err != nil {
			return err
		}
	} else if err := atomicfile.UnmarshalState(data, stateMagic, stateVersion, &st); err != nil {
		return invalidf("restore: not a noise-source state: %s", atomicfile.Reason(err))
	}
	switch {
	case len(st.Mech) != 32 || len(st.Plan) != 32:
		return invalidf("restore: corrupt state")
	case st.N != c.n || st.M != c.m:
		return invalidf("restore: state is for a different mechanism (%s, n = %d, m = %d) than this source (%s, n = %d, m = %d)", st.Kind, st.N, st.M, c.kind, c.n, c.m)
	case [32]byte(st.Mech) != c.mech:
		return invalidf("restore: state was made with another encoder of the same shape (%s, n = %d, m = %d): the mechanism was built otherwise, e.g. optimized by another build; resume with the factorization cache that holds the original", st.Kind, st.N, st.M)
	case st.D != c.d:
		return invalidf("restore: state has d = %d, this source d = %d", st.D, c.d)
	case st.Elem != c.elem:
		return invalidf("restore: state has %d-byte elements, this source %d", st.Elem, c.elem)
	case st.Kind != c.kind || [32]byte(st.Plan) != c.plan:
		return invalidf("restore: state uses method %q with another memory plan; this source uses %q (build it with the same MemoryBudget and Workers)", st.Kind, c.kind)
	case st.Step < 0 || st.Step > c.n:
		return invalidf("restore: step %d out of range [0, %d]", st.Step, c.n)
	case len(st.Buffers) != s.stateSize(st.Step):
		return invalidf("restore: state has %d bytes of buffers, want %d", len(st.Buffers), s.stateSize(st.Step))
	}
	c.step = st.Step
	return s.restoreState(&reader{b: st.Buffers})
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

func appendFloats[T floatT](b []byte, x []T) []byte { return atomicfile.AppendFloats(b, x) }

// reader decodes a checkpoint, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.err = invalidf("restore: state truncated")
		r.b = nil
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) uint64() uint64 {
	p := r.bytes(8)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

func (r *reader) string() string {
	n := r.uint64()
	if n > 1<<10 {
		r.err = invalidf("restore: corrupt state")
		return ""
	}
	return string(r.bytes(int(n)))
}

func (r *reader) key() key {
	var k key
	copy(k[:], r.bytes(32))
	return k
}

func readFloats[T floatT](r *reader, dst []T) {
	if p := r.bytes(elemSize[T]() * len(dst)); p != nil {
		atomicfile.ReadFloats(dst, p)
	}
}
