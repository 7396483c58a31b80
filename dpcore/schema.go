package dpcore

import "fmt"

// SchemaKind names a participation schema (SPEC 3).
type SchemaKind string

const (
	// Single: every example joins at most one step.
	Single SchemaKind = "single"
	// KB: (k,b)-participation, fixed-order epochs: example j joins steps
	// j, j+b, j+2b, ... at most k times (multi-epoch paper Sec. 2).
	KB SchemaKind = "kb"
	// MinSep: (k,b)-min-separation: at most k participations, any two at
	// least b steps apart (banded-MF paper Def. 1).
	MinSep SchemaKind = "minsep"
)

// Schema is a participation schema: the set of step patterns one example may
// join. Sensitivity is always computed for the schema a run actually uses.
type Schema struct {
	Kind SchemaKind `msgpack:"kind" json:"kind"`
	// K is the maximum number of participations (1 for Single).
	K int `msgpack:"k" json:"k"`
	// B is the separation: the number of steps between participations.
	B int `msgpack:"b" json:"b"`
}

// SingleParticipation is the schema where each example joins one step.
func SingleParticipation() Schema { return Schema{Kind: Single, K: 1, B: 1} }

// KBParticipation is (k,b)-participation.
func KBParticipation(k, b int) (Schema, error) {
	s := Schema{Kind: KB, K: k, B: b}
	return s, s.validate()
}

// MinSepParticipation is (k,b)-min-separation participation.
func MinSepParticipation(k, b int) (Schema, error) {
	s := Schema{Kind: MinSep, K: k, B: b}
	return s, s.validate()
}

// Check validates the schema's own fields (kind, k, b), independent of a
// number of steps.
func (s Schema) Check() error { return s.validate() }

func (s Schema) validate() error {
	switch s.Kind {
	case Single:
		return nil
	case KB, MinSep:
		if s.K <= 0 || s.B <= 0 {
			return invalidf("schema %s: k = %d and b = %d must be positive", s.Kind, s.K, s.B)
		}
		return nil
	}
	return invalidf("unknown schema kind %q", s.Kind)
}

// Validate checks the schema against a stream of n steps. (k,b)-participation
// needs k*b >= n: with k*b < n the steps past k*b have no pattern and there is
// no truncation rule, so it is refused.
func (s Schema) Validate(n int) error {
	if err := s.validate(); err != nil {
		return err
	}
	if n <= 0 {
		return invalidf("n = %d must be positive", n)
	}
	if s.Kind == KB && s.K*s.B < n {
		return invalidf("(k=%d,b=%d)-participation covers k*b = %d < n = %d steps", s.K, s.B, s.K*s.B, n)
	}
	return nil
}

// String is e.g. "kb(k=20,b=100)".
func (s Schema) String() string {
	if s.Kind == Single {
		return "single"
	}
	return fmt.Sprintf("%s(k=%d,b=%d)", s.Kind, s.K, s.B)
}

// Patterns returns the (k,b)-participation patterns pi_j = {j, j+b, ...}
// (0-based, at most k steps each, truncated at n). Single participation has
// the n singleton patterns. Min-sep schemas have too many patterns to list
// and return nil.
func (s Schema) Patterns(n int) [][]int {
	switch s.Kind {
	case Single:
		p := make([][]int, n)
		for i := range p {
			p[i] = []int{i}
		}
		return p
	case KB:
		b := min(s.B, n)
		p := make([][]int, b)
		for j := 0; j < b; j++ {
			for i, c := j, 0; i < n && c < s.K; i, c = i+s.B, c+1 {
				p[j] = append(p[j], i)
			}
		}
		return p
	}
	return nil
}
