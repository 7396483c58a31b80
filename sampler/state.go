package sampler

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	mrand "math/rand/v2"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// impl is what every concrete sampler provides beyond Sampler, for saving
// and restoring.
type impl interface {
	Sampler
	base() *core
	// appendExtra appends kind-specific state (beyond step and generator).
	appendExtra([]byte) []byte
	// setExtra restores what appendExtra saved.
	setExtra([]byte) error
}

// build makes a sampler of p.kind from already derived seeds, validating p
// (so a corrupted state is refused like bad constructor arguments).
func build(p params, permSeed, stepSeed [32]byte) (impl, error) {
	switch p.kind {
	case kindFixedOrder:
		return implIfOK(newFixedOrder(p, permSeed, stepSeed))
	case kindPoisson:
		return implIfOK(newPoisson(p, permSeed, stepSeed))
	case kindBandPoisson:
		return implIfOK(newBandPoisson(p, permSeed, stepSeed))
	case kindMinSep:
		return implIfOK(newMinSep(p, permSeed, stepSeed))
	case kindShuffle:
		return implIfOK(newShuffle(p, permSeed, stepSeed))
	case kindAllocation:
		return implIfOK(newAllocation(p, permSeed, stepSeed))
	case kindBandAllocation:
		return implIfOK(newBandAllocation(p, permSeed, stepSeed))
	}
	return nil, invalidf("unknown sampler kind %d", uint8(p.kind))
}

// A sampler's state is a savedState in the state codec of package
// atomicfile (kind stateMagic, format stateVersion). The builds before it
// wrote a hand-made binary record starting with legacyMagic, which still
// restores (readLegacy).
const (
	stateMagic   = "dpmf-sampler"
	stateVersion = 2
	legacyMagic  = "dpmfsmp\x01"
)

// savedState is a sampler's complete state: its constructor arguments,
// the step, the permutation seed, the generator's state and the kind's
// own extra state (appendExtra).
type savedState struct {
	Kind      uint8   `msgpack:"kind"`
	M         int     `msgpack:"m"`
	N         int     `msgpack:"n"`
	Batch     int     `msgpack:"batch"`
	Bands     int     `msgpack:"bands"`
	K         int     `msgpack:"k"`
	B         int     `msgpack:"b"`
	Fixed     bool    `msgpack:"fixed_size"`
	Q         float64 `msgpack:"q"`
	Avail     float64 `msgpack:"availability"`
	Step      int     `msgpack:"step"`
	PermSeed  []byte  `msgpack:"perm_seed"`
	Generator []byte  `msgpack:"generator"`
	Extra     []byte  `msgpack:"extra"`
}

func (st *savedState) params() params {
	return params{kind: kind(st.Kind), m: st.M, n: st.N, batch: st.Batch, bands: st.Bands, k: st.K, b: st.B,
		fixed: st.Fixed, q: st.Q, avail: st.Avail}
}

func marshal(s impl) ([]byte, error) {
	c := s.base()
	rs, err := c.src.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("sampler: saving generator: %w", err)
	}
	p := c.p
	return atomicfile.MarshalState(stateMagic, stateVersion, &savedState{
		Kind: uint8(p.kind), M: p.m, N: p.n, Batch: p.batch, Bands: p.bands, K: p.k, B: p.b, Fixed: p.fixed,
		Q: p.q, Avail: p.avail, Step: c.step, PermSeed: c.permSeed[:], Generator: rs, Extra: s.appendExtra(nil)})
}

// reader decodes a legacy state, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = invalidf("corrupt sampler state: %s", what)
	}
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) int(what string) int {
	v := r.uvarint(what)
	if v > math.MaxInt64 {
		r.fail(what)
		return 0
	}
	return int(v)
}

func (r *reader) bytes(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail(what)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) float(what string) float64 {
	var v [1]float64
	if _, err := atomicfile.ReadFloats(v[:], r.bytes(8, what)); err != nil {
		r.fail(what)
	}
	return v[0]
}

// readLegacy decodes a state written before the state codec: the magic,
// the kind, the parameters as uvarints and float64s, the step, the seed,
// then the generator's and the kind's state, each after its length.
func readLegacy(data []byte) (savedState, error) {
	r := &reader{b: data[len(legacyMagic):]}
	var st savedState
	if k := r.bytes(1, "kind"); k != nil {
		st.Kind = k[0]
	}
	st.M = r.int("m")
	st.N = r.int("n")
	st.Batch = r.int("batch")
	st.Bands = r.int("bands")
	st.K = r.int("k")
	st.B = r.int("b")
	fixed := r.uvarint("fixedSize")
	st.Fixed = fixed == 1
	if fixed > 1 {
		r.fail("fixedSize")
	}
	st.Q = r.float("q")
	st.Avail = r.float("availability")
	st.Step = r.int("step")
	st.PermSeed = r.bytes(32, "seed")
	st.Generator = r.bytes(r.int("generator length"), "generator")
	st.Extra = r.bytes(r.int("extra length"), "extra")
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	return st, r.err
}

// Restore builds a sampler from a state saved by MarshalBinary, with the
// constructor arguments and seed it was built with.
func Restore(data []byte) (Sampler, error) {
	return restore(data)
}

func restore(data []byte) (impl, error) {
	st, err := decodeState(data)
	if err != nil {
		return nil, err
	}
	return restoreState(st)
}

// decodeState is the saved state data holds, in either format.
func decodeState(data []byte) (savedState, error) {
	var st savedState
	if bytes.HasPrefix(data, []byte(legacyMagic)) {
		return readLegacy(data)
	}
	if err := atomicfile.UnmarshalState(data, stateMagic, stateVersion, &st); err != nil {
		return st, invalidf("not a sampler state: %s", atomicfile.Reason(err))
	}
	return st, nil
}

// restoreState builds the sampler st describes.
func restoreState(st savedState) (impl, error) {
	p := st.params()
	if len(st.PermSeed) != 32 {
		return nil, invalidf("corrupt sampler state: seed of %d bytes", len(st.PermSeed))
	}
	if p.kind == kindMinSep && len(st.Extra) < 2*p.m {
		// Check before allocating O(m) records for a corrupt m.
		return nil, invalidf("corrupt sampler state: %d bytes of participation records for m = %d", len(st.Extra), p.m)
	}
	// The cheap checks come before build, whose partition of m examples
	// a corrupt m would make take seconds.
	var src mrand.ChaCha8
	if err := src.UnmarshalBinary(st.Generator); err != nil {
		return nil, invalidf("corrupt sampler state: generator: %v", err)
	}
	if st.Step < 0 || st.Step > p.n {
		return nil, invalidf("corrupt sampler state: step %d > n = %d", st.Step, p.n)
	}
	s, err := build(p, [32]byte(st.PermSeed), [32]byte{})
	if err != nil {
		return nil, fmt.Errorf("sampler: restoring: %w", err)
	}
	c := s.base()
	*c.src = src
	c.step = st.Step
	if err := s.setExtra(st.Extra); err != nil {
		return nil, err
	}
	return s, nil
}

// unmarshalInto restores data into s, refusing a state saved by a sampler of
// another kind or with other parameters: that would silently change the
// participation the run's privacy claim assumed.
func unmarshalInto[T any, PT interface {
	*T
	impl
}](s PT, data []byte) error {
	st, err := decodeState(data)
	if err != nil {
		return err
	}
	// Compared before building: a state of another configuration (or a
	// corrupt m) never costs a partition of its m examples.
	if got, want := st.params(), s.base().p; got != want {
		return invalidf("state was saved by %v, cannot restore into %v", got, want)
	}
	r, err := restoreState(st)
	if err != nil {
		return err
	}
	t, ok := r.(PT)
	if !ok {
		return invalidf("state was saved by %v", r.base().p)
	}
	*s = *t
	return nil
}

// nilIfErr avoids returning a non-nil Sampler holding a nil pointer.
func nilIfErr[T impl](s T, err error) (Sampler, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

func implIfOK[T impl](s T, err error) (impl, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}
