package optim

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// An optimizer's state is a savedState in the state codec of package
// atomicfile (kind stateMagic, format stateVersion). Before it, the state
// was the bare msgpack record with Version 1 (legacyStateVersion), which
// still restores.
const (
	stateMagic         = "dpmf-optimizer"
	stateVersion       = 2
	legacyStateVersion = 1
)

// maxStateSteps bounds the schedule length a saved state may declare.
const maxStateSteps = 1 << 26

// savedState is the checkpoint format of every optimizer. Buffers are raw
// little-endian IEEE bits (atomicfile.AppendFloats), so a restore is
// bit-identical.
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

// decodeBuffer decodes a state buffer of dimension dim.
func decodeBuffer[T float32 | float64](b []byte, dim int) ([]T, error) {
	v, err := atomicfile.DecodeFloats[T](b, dim)
	if err != nil {
		return nil, invalidf("state: %s", atomicfile.Reason(err))
	}
	return v, nil
}

func marshalState(s *savedState) ([]byte, error) {
	s.Version = stateVersion
	return atomicfile.MarshalState(stateMagic, stateVersion, s)
}

func unmarshalState(data []byte, kind string) (savedState, error) {
	var s savedState
	if err := atomicfile.UnmarshalState(data, stateMagic, stateVersion, &s); err != nil {
		// A state of the builds before the state codec?
		s = savedState{}
		if lerr := atomicfile.Unmarshal(data, &s); lerr != nil || s.Version != legacyStateVersion {
			return s, invalidf("%s: state: %s", kind, atomicfile.Reason(err))
		}
	} else if s.Version != stateVersion {
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
		s.Buffers = [][]byte{atomicfile.AppendFloats(nil, h.m32)}
	case h.m64 != nil:
		s.Buffers = [][]byte{atomicfile.AppendFloats(nil, h.m64)}
	}
	return marshalState(&s)
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
			g.m32, err = decodeBuffer[float32](s.Buffers[0], g.dim)
		} else {
			g.m64, err = decodeBuffer[float64](s.Buffers[0], g.dim)
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
		s.Buffers = [][]byte{atomicfile.AppendFloats(nil, o.m32), atomicfile.AppendFloats(nil, o.v32)}
	case prec64:
		s.Buffers = [][]byte{atomicfile.AppendFloats(nil, o.m64), atomicfile.AppendFloats(nil, o.v64)}
	}
	return marshalState(&s)
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
		if a.m32, err = decodeBuffer[float32](s.Buffers[0], a.dim); err == nil {
			a.v32, err = decodeBuffer[float32](s.Buffers[1], a.dim)
		}
	case prec64:
		if a.m64, err = decodeBuffer[float64](s.Buffers[0], a.dim); err == nil {
			a.v64, err = decodeBuffer[float64](s.Buffers[1], a.dim)
		}
	}
	if err != nil {
		return fmt.Errorf("optim: adam: %w", err)
	}
	*o = *a
	return nil
}
