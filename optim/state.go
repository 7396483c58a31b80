package optim

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

const stateVersion = 1

// maxStateSteps bounds the schedule length a saved state may declare.
const maxStateSteps = 1 << 26

// savedState is the checkpoint format of every optimizer. Buffers are raw
// little-endian IEEE bits, so a restore is bit-identical.
type savedState struct {
	Version   int             `msgpack:"version"`
	Kind      string          `msgpack:"kind"`
	Dim       int             `msgpack:"dim"`
	Steps     int             `msgpack:"steps"`
	Step      int             `msgpack:"step"`
	Beta      float64         `msgpack:"beta"`
	Nesterov  bool            `msgpack:"nesterov"`
	Decay     float64         `msgpack:"weight_decay"`
	Adam      AdamOptions     `msgpack:"adam"`
	Schedule  dpcore.Schedule `msgpack:"schedule"`
	Precision uint8           `msgpack:"precision"`
	Buffers   [][]byte        `msgpack:"buffers"`
}

func encode32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func encode64(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

func decode32(b []byte, dim int) ([]float32, error) {
	// Compare by division: 4*dim can overflow for a corrupt dim.
	if len(b)%4 != 0 || len(b)/4 != dim {
		return nil, invalidf("state: float32 buffer has %d bytes for dimension %d", len(b), dim)
	}
	v := make([]float32, dim)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

func decode64(b []byte, dim int) ([]float64, error) {
	if len(b)%8 != 0 || len(b)/8 != dim {
		return nil, invalidf("state: float64 buffer has %d bytes for dimension %d", len(b), dim)
	}
	v := make([]float64, dim)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return v, nil
}

func unmarshalState(data []byte, kind string) (savedState, error) {
	var s savedState
	if err := atomicfile.Unmarshal(data, &s); err != nil {
		return s, invalidf("%s: state: %s", kind, atomicfile.Reason(err))
	}
	if s.Version != stateVersion {
		return s, invalidf("%s: state version %d, this build reads %d", kind, s.Version, stateVersion)
	}
	if s.Kind != kind {
		return s, invalidf("state of a %q optimizer cannot restore a %q optimizer", s.Kind, kind)
	}
	if s.Step < 0 || s.Step > s.Steps {
		return s, invalidf("%s: state step %d outside [0, %d]", kind, s.Step, s.Steps)
	}
	// A corrupt state must not make the restore allocate without bound: the
	// rates take 8 bytes per step.
	if s.Steps > maxStateSteps {
		return s, invalidf("%s: state has %d steps, more than %d", kind, s.Steps, maxStateSteps)
	}
	if p := precision(s.Precision); p > prec64 || (s.Step > 0 && p == precUnset) {
		return s, invalidf("%s: state precision %d after %d steps", kind, s.Precision, s.Step)
	}
	return s, nil
}

func (h *heavyBall) marshal(kind string) ([]byte, error) {
	if h.dim <= 0 {
		return nil, invalidf("%s: marshal: optimizer is not initialized", kind)
	}
	s := savedState{
		Version: stateVersion, Kind: kind, Dim: h.dim, Steps: len(h.rates), Step: h.step,
		Beta: h.beta, Nesterov: h.opt.Nesterov, Decay: h.opt.WeightDecay,
		Schedule: h.sched, Precision: uint8(h.prec),
	}
	switch {
	case h.m32 != nil:
		s.Buffers = [][]byte{encode32(h.m32)}
	case h.m64 != nil:
		s.Buffers = [][]byte{encode64(h.m64)}
	}
	return msgpack.Marshal(&s)
}

func (h *heavyBall) unmarshal(data []byte, kind string) error {
	s, err := unmarshalState(data, kind)
	if err != nil {
		return err
	}
	g, err := newHeavyBall(kind, s.Dim, s.Beta, s.Schedule, s.Steps, MomentumOptions{Nesterov: s.Nesterov, WeightDecay: s.Decay})
	if err != nil {
		return fmt.Errorf("optim: restoring state: %w", err)
	}
	g.step, g.prec = s.Step, precision(s.Precision)
	wantBuf := g.buffered() && g.prec != precUnset
	if (len(s.Buffers) == 1) != wantBuf || len(s.Buffers) > 1 {
		return invalidf("%s: state has %d buffers for beta = %v, precision %v", kind, len(s.Buffers), g.beta, g.prec)
	}
	if wantBuf {
		if g.prec == prec32 {
			g.m32, err = decode32(s.Buffers[0], g.dim)
		} else {
			g.m64, err = decode64(s.Buffers[0], g.dim)
		}
		if err != nil {
			return fmt.Errorf("optim: %s: %w", kind, err)
		}
	}
	*h = g
	return nil
}

// MarshalBinary saves the complete state: configuration, step and buffers.
func (o *SGD) MarshalBinary() ([]byte, error) { return o.h.marshal("sgd") }

// UnmarshalBinary replaces o's configuration and state by the saved ones.
// It works on a zero SGD.
func (o *SGD) UnmarshalBinary(data []byte) error { return o.h.unmarshal(data, "sgd") }

// MarshalBinary saves the complete state: configuration, step and buffers.
func (o *Momentum) MarshalBinary() ([]byte, error) { return o.h.marshal("momentum") }

// UnmarshalBinary replaces o's configuration and state by the saved ones.
// It works on a zero Momentum.
func (o *Momentum) UnmarshalBinary(data []byte) error { return o.h.unmarshal(data, "momentum") }

// MarshalBinary saves the complete state: configuration, step and moments.
func (o *Adam) MarshalBinary() ([]byte, error) {
	if o.dim <= 0 {
		return nil, invalidf("adam: marshal: optimizer is not initialized")
	}
	s := savedState{
		Version: stateVersion, Kind: "adam", Dim: o.dim, Steps: len(o.rates), Step: o.step,
		Adam: o.opt, Schedule: o.sched, Precision: uint8(o.prec),
	}
	switch o.prec {
	case prec32:
		s.Buffers = [][]byte{encode32(o.m32), encode32(o.v32)}
	case prec64:
		s.Buffers = [][]byte{encode64(o.m64), encode64(o.v64)}
	}
	return msgpack.Marshal(&s)
}

// UnmarshalBinary replaces o's configuration and state by the saved ones.
// It works on a zero Adam.
func (o *Adam) UnmarshalBinary(data []byte) error {
	s, err := unmarshalState(data, "adam")
	if err != nil {
		return err
	}
	a, err := NewAdam(s.Dim, s.Schedule, s.Steps, s.Adam)
	if err != nil {
		return fmt.Errorf("optim: adam: state: %w", err)
	}
	a.step, a.prec = s.Step, precision(s.Precision)
	want := 0
	if a.prec != precUnset {
		want = 2
	}
	if len(s.Buffers) != want {
		return invalidf("adam: state has %d buffers, want %d", len(s.Buffers), want)
	}
	switch a.prec {
	case prec32:
		if a.m32, err = decode32(s.Buffers[0], a.dim); err == nil {
			a.v32, err = decode32(s.Buffers[1], a.dim)
		}
	case prec64:
		if a.m64, err = decode64(s.Buffers[0], a.dim); err == nil {
			a.v64, err = decode64(s.Buffers[1], a.dim)
		}
	}
	if err != nil {
		return fmt.Errorf("optim: adam: %w", err)
	}
	*o = *a
	return nil
}
