package dpcore

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Epsilon is the epsilon of an (epsilon, delta) guarantee as it is written
// in JSON. A finite epsilon is a JSON number; +Inf, the legitimate answer
// "no finite guarantee" (a noise multiplier too small for any epsilon at
// that delta), is the JSON string "+Inf", which encoding/json cannot write
// as a number. NaN and -Inf are never an epsilon and are refused.
type Epsilon float64

// Infinite reports whether e is +Inf: no finite guarantee.
func (e Epsilon) Infinite() bool { return math.IsInf(float64(e), 1) }

// String is e in %g, or "+Inf (no finite guarantee)".
func (e Epsilon) String() string {
	if e.Infinite() {
		return "+Inf (no finite guarantee)"
	}
	return strconv.FormatFloat(float64(e), 'g', -1, 64)
}

// MarshalJSON writes a finite e as a number and +Inf as "+Inf".
func (e Epsilon) MarshalJSON() ([]byte, error) {
	switch {
	case e.Infinite():
		return []byte(`"+Inf"`), nil
	case math.IsNaN(float64(e)) || math.IsInf(float64(e), -1) || e < 0:
		return nil, fmt.Errorf("dpcore: epsilon %v is not a guarantee", float64(e))
	}
	return json.Marshal(float64(e))
}

// UnmarshalJSON reads a number or "+Inf".
func (e *Epsilon) UnmarshalJSON(b []byte) error {
	if string(b) == `"+Inf"` {
		*e = Epsilon(math.Inf(1))
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("dpcore: epsilon %s: want a number or \"+Inf\"", b)
	}
	if v < 0 {
		return fmt.Errorf("dpcore: epsilon %s is negative", b)
	}
	*e = Epsilon(v)
	return nil
}
