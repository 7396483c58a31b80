package accountant

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// An Event describes a randomized mechanism to account for. Events are
// built with Gaussian, PoissonSampled, RandomAllocation, SelfComposed and
// Composed; the set is closed so that every accountant knows every kind.
// Constructors do not validate: an invalid event is reported, with
// dpcore.ErrInvalid, when it is accounted for. Every Event marshals to JSON
// (see UnmarshalEvent) so that a run's ledger records exactly what was
// accounted for.
type Event interface {
	json.Marshaler
	isEvent()
}

// Gaussian returns the Gaussian mechanism with sensitivity 1 and noise
// standard deviation sigma (the noise multiplier).
func Gaussian(sigma float64) Event { return gaussianEvent{Sigma: sigma} }

// PoissonSampled returns event e run on a Poisson sample of the data set in
// which every example is included independently with probability q.
// Accountants support only a Gaussian mechanism inside.
func PoissonSampled(q float64, e Event) Event { return poissonEvent{Q: q, Event: e} }

// RandomAllocation returns t runs of event e in which every example joins
// exactly one run, drawn uniformly and independently of the other examples
// (random allocation, Feldman and Shenfeld 2025; dp_accounting's
// RandomAllocationDpEvent with num_selected = 1, num_steps = t): one epoch
// of DP-SGD under sampler.NewRandomAllocation. Only a Gaussian mechanism is
// supported inside, and only by the PLD accountant (the RDP accountant
// reports ErrUnsupported). t = 1 is the mechanism itself.
func RandomAllocation(t int, e Event) Event { return allocationEvent{Steps: t, Event: e} }

// SelfComposed returns the adaptive composition of T runs of e.
func SelfComposed(e Event, T int) Event { return selfComposedEvent{Event: e, Count: T} }

// Composed returns the adaptive composition of the given events.
func Composed(events ...Event) Event {
	return composedEvent{Events: append([]Event(nil), events...)}
}

type gaussianEvent struct{ Sigma float64 }
type poissonEvent struct {
	Q     float64
	Event Event
}
type allocationEvent struct {
	Steps int
	Event Event
}
type selfComposedEvent struct {
	Event Event
	Count int
}
type composedEvent struct{ Events []Event }

func (gaussianEvent) isEvent()     {}
func (poissonEvent) isEvent()      {}
func (allocationEvent) isEvent()   {}
func (selfComposedEvent) isEvent() {}
func (composedEvent) isEvent()     {}

// eventJSON is the wire form of every event kind.
type eventJSON struct {
	Kind   string            `json:"kind"`
	Sigma  float64           `json:"sigma,omitempty"`
	Q      float64           `json:"q,omitempty"`
	Count  int               `json:"count,omitempty"`
	Steps  int               `json:"steps,omitempty"`
	Event  json.RawMessage   `json:"event,omitempty"`
	Events []json.RawMessage `json:"events,omitempty"`
}

const (
	kindGaussian     = "gaussian"
	kindPoisson      = "poisson_sampled"
	kindSelfComposed = "self_composed"
	kindComposed     = "composed"
	kindAllocation   = "random_allocation"
)

func marshalInner(e Event) (json.RawMessage, error) {
	if e == nil {
		return json.RawMessage("null"), nil
	}
	return e.MarshalJSON()
}

// MarshalJSON implements json.Marshaler.
func (g gaussianEvent) MarshalJSON() ([]byte, error) {
	return json.Marshal(eventJSON{Kind: kindGaussian, Sigma: g.Sigma})
}

// MarshalJSON implements json.Marshaler.
func (p poissonEvent) MarshalJSON() ([]byte, error) {
	in, err := marshalInner(p.Event)
	if err != nil {
		return nil, err
	}
	return json.Marshal(eventJSON{Kind: kindPoisson, Q: p.Q, Event: in})
}

// MarshalJSON implements json.Marshaler.
func (a allocationEvent) MarshalJSON() ([]byte, error) {
	in, err := marshalInner(a.Event)
	if err != nil {
		return nil, err
	}
	return json.Marshal(eventJSON{Kind: kindAllocation, Steps: a.Steps, Event: in})
}

// MarshalJSON implements json.Marshaler.
func (s selfComposedEvent) MarshalJSON() ([]byte, error) {
	in, err := marshalInner(s.Event)
	if err != nil {
		return nil, err
	}
	return json.Marshal(eventJSON{Kind: kindSelfComposed, Count: s.Count, Event: in})
}

// MarshalJSON implements json.Marshaler.
func (c composedEvent) MarshalJSON() ([]byte, error) {
	ev := eventJSON{Kind: kindComposed, Events: make([]json.RawMessage, len(c.Events))}
	for i, e := range c.Events {
		in, err := marshalInner(e)
		if err != nil {
			return nil, err
		}
		ev.Events[i] = in
	}
	return json.Marshal(ev)
}

// UnmarshalEvent decodes an event written by its MarshalJSON method.
func UnmarshalEvent(data []byte) (Event, error) {
	var ev eventJSON
	if err := json.Unmarshal(data, &ev); err != nil {
		return nil, fmt.Errorf("accountant: decoding event: %w", err)
	}
	switch ev.Kind {
	case kindGaussian:
		return Gaussian(ev.Sigma), nil
	case kindPoisson, kindSelfComposed, kindAllocation:
		in, err := UnmarshalEvent(ev.Event)
		if err != nil {
			return nil, err
		}
		switch ev.Kind {
		case kindPoisson:
			return PoissonSampled(ev.Q, in), nil
		case kindAllocation:
			return RandomAllocation(ev.Steps, in), nil
		}
		return SelfComposed(in, ev.Count), nil
	case kindComposed:
		es := make([]Event, len(ev.Events))
		for i, raw := range ev.Events {
			e, err := UnmarshalEvent(raw)
			if err != nil {
				return nil, err
			}
			es[i] = e
		}
		return Composed(es...), nil
	}
	return nil, invalidf("decoding event: unknown kind %q", ev.Kind)
}

// component is count compositions of a Gaussian mechanism with noise
// multiplier sigma, Poisson subsampled at rate q (q = 1: no subsampling),
// or, with alloc > 1 (and q = 1), randomly allocated over alloc steps.
// Every supported event reduces to a list of components.
type component struct {
	sigma, q float64
	count    int
	alloc    int
}

// maxAllocation bounds the steps of a random allocation: its loss grid is
// built by about 2 log2(t) convolutions, each rounding the loss up by a
// grid step.
const maxAllocation = 1 << 20

// maxCount bounds total compositions so that counts stay exact in float64.
const maxCount = 1 << 40

// components reduces e to its distinct (sigma, q) components, validating
// every parameter on the way.
func components(e Event) ([]component, error) {
	var out []component
	if err := appendComponents(&out, e, 1); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, invalidf("event composes no mechanism")
	}
	// Merge equal mechanisms: composition only depends on the multiset.
	sort.Slice(out, func(i, j int) bool {
		if out[i].sigma != out[j].sigma {
			return out[i].sigma < out[j].sigma
		}
		if out[i].alloc != out[j].alloc {
			return out[i].alloc < out[j].alloc
		}
		return out[i].q < out[j].q
	})
	merged := out[:1]
	for _, c := range out[1:] {
		last := &merged[len(merged)-1]
		if c.sigma == last.sigma && c.q == last.q && c.alloc == last.alloc {
			last.count += c.count
			if last.count > maxCount {
				return nil, invalidf("more than %d compositions", maxCount)
			}
			continue
		}
		merged = append(merged, c)
	}
	return merged, nil
}

func appendComponents(out *[]component, e Event, mult int) error {
	switch e := e.(type) {
	case gaussianEvent:
		if err := checkSigma(e.Sigma); err != nil {
			return err
		}
		*out = append(*out, component{sigma: e.Sigma, q: 1, count: mult})
	case poissonEvent:
		if err := checkQ(e.Q); err != nil {
			return err
		}
		g, ok := e.Event.(gaussianEvent)
		if !ok {
			return fmt.Errorf("accountant: Poisson subsampling of %s: only a Gaussian mechanism is supported inside: %w",
				kindOf(e.Event), ErrUnsupported)
		}
		if err := checkSigma(g.Sigma); err != nil {
			return err
		}
		*out = append(*out, component{sigma: g.Sigma, q: e.Q, count: mult})
	case allocationEvent:
		if e.Steps <= 0 || e.Steps > maxAllocation {
			return invalidf("random allocation over t = %d steps, want 1 <= t <= %d", e.Steps, maxAllocation)
		}
		g, ok := e.Event.(gaussianEvent)
		if !ok {
			return fmt.Errorf("accountant: random allocation of %s: only a Gaussian mechanism is supported inside: %w",
				kindOf(e.Event), ErrUnsupported)
		}
		if err := checkSigma(g.Sigma); err != nil {
			return err
		}
		c := component{sigma: g.Sigma, q: 1, count: mult}
		if e.Steps > 1 {
			c.alloc = e.Steps
		}
		*out = append(*out, c)
	case selfComposedEvent:
		if e.Count <= 0 {
			return invalidf("composition count T = %d, want > 0", e.Count)
		}
		if e.Count > maxCount/mult {
			return invalidf("more than %d compositions", maxCount)
		}
		return appendComponents(out, e.Event, mult*e.Count)
	case composedEvent:
		if len(e.Events) == 0 {
			return invalidf("composition of no events")
		}
		for _, in := range e.Events {
			if err := appendComponents(out, in, mult); err != nil {
				return err
			}
		}
	case nil:
		return invalidf("nil event")
	default:
		return fmt.Errorf("accountant: event %T: %w", e, ErrUnsupported)
	}
	return nil
}

func kindOf(e Event) string {
	switch e.(type) {
	case gaussianEvent:
		return kindGaussian
	case poissonEvent:
		return kindPoisson
	case allocationEvent:
		return kindAllocation
	case selfComposedEvent:
		return kindSelfComposed
	case composedEvent:
		return kindComposed
	case nil:
		return "nil event"
	}
	return fmt.Sprintf("%T", e)
}

func isInf(x float64) bool { return math.IsInf(x, 0) || math.IsNaN(x) }
