package sampler

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// stateMagic starts every saved state; the last byte is the format version.
const stateMagic = "dpmfsmp\x01"

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
	}
	return nil, invalidf("unknown sampler kind %d", uint8(p.kind))
}

func marshal(s impl) ([]byte, error) {
	c := s.base()
	rs, err := c.src.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("sampler: saving generator: %w", err)
	}
	b := []byte(stateMagic)
	b = append(b, byte(c.p.kind))
	fixed := 0
	if c.p.fixed {
		fixed = 1
	}
	for _, v := range []int{c.p.m, c.p.n, c.p.batch, c.p.bands, c.p.k, c.p.b, fixed} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.p.q))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.p.avail))
	b = binary.AppendUvarint(b, uint64(c.step))
	b = append(b, c.permSeed[:]...)
	b = binary.AppendUvarint(b, uint64(len(rs)))
	b = append(b, rs...)
	extra := s.appendExtra(nil)
	b = binary.AppendUvarint(b, uint64(len(extra)))
	b = append(b, extra...)
	return b, nil
}

// reader decodes a saved state, remembering the first error.
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
	v := r.bytes(8, what)
	if v == nil {
		return 0
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(v))
}

// Restore builds a sampler from a state saved by MarshalBinary, with the
// constructor arguments and seed it was built with.
func Restore(data []byte) (Sampler, error) {
	return restore(data)
}

func restore(data []byte) (impl, error) {
	if !bytes.HasPrefix(data, []byte(stateMagic)) {
		return nil, invalidf("not a sampler state (bad header)")
	}
	r := &reader{b: data[len(stateMagic):]}
	var p params
	if k := r.bytes(1, "kind"); k != nil {
		p.kind = kind(k[0])
	}
	p.m = r.int("m")
	p.n = r.int("n")
	p.batch = r.int("batch")
	p.bands = r.int("bands")
	p.k = r.int("k")
	p.b = r.int("b")
	fixed := r.uvarint("fixedSize")
	p.fixed = fixed == 1
	if fixed > 1 {
		r.fail("fixedSize")
	}
	p.q = r.float("q")
	p.avail = r.float("availability")
	step := r.int("step")
	var permSeed [32]byte
	copy(permSeed[:], r.bytes(32, "seed"))
	rs := r.bytes(r.int("generator length"), "generator")
	extra := r.bytes(r.int("extra length"), "extra")
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, r.err
	}
	if p.kind == kindMinSep && len(extra) < 2*p.m {
		// Check before allocating O(m) records for a corrupt m.
		return nil, invalidf("corrupt sampler state: %d bytes of participation records for m = %d", len(extra), p.m)
	}
	s, err := build(p, permSeed, [32]byte{})
	if err != nil {
		return nil, fmt.Errorf("sampler: restoring: %w", err)
	}
	c := s.base()
	if err := c.src.UnmarshalBinary(rs); err != nil {
		return nil, invalidf("corrupt sampler state: generator: %v", err)
	}
	if step > p.n {
		return nil, invalidf("corrupt sampler state: step %d > n = %d", step, p.n)
	}
	c.step = step
	if err := s.setExtra(extra); err != nil {
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
	r, err := restore(data)
	if err != nil {
		return err
	}
	if got, want := r.base().p, s.base().p; got != want {
		return invalidf("state was saved by %v, cannot restore into %v", got, want)
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
