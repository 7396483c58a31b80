package models

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/nn"
)

// Format version 1 of the model file named one of three constructors
// instead of listing layers. Load still reads it: the constructor rebuilds
// the network, whose layer description (Architecture) a new Save writes as
// version 2.

type archV1 struct {
	Name       string `msgpack:"name"`
	Input      [3]int `msgpack:"input"`
	Classes    int    `msgpack:"classes"`
	Hidden     []int  `msgpack:"hidden,omitempty"`
	Activation string `msgpack:"activation,omitempty"`
}

type payloadV1 struct {
	Arch   archV1   `msgpack:"arch"`
	Meta   Metadata `msgpack:"meta"`
	Params []byte   `msgpack:"params"`
}

func loadV1(payload []byte) (*Trained, error) {
	var p payloadV1
	if err := atomicfile.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("models: load: %w: version 1 payload: %s", ErrCorruptFile, atomicfile.Reason(err))
	}
	if n := len(p.Params); n%4 != 0 || n/4 > maxFileParams {
		return nil, fmt.Errorf("models: load: %w: %d parameter bytes", ErrCorruptFile, n)
	}
	want, err := p.Arch.numParams()
	if err != nil {
		return nil, fmt.Errorf("models: load: %w: %v", ErrCorruptFile, err)
	}
	if want != float64(len(p.Params)/4) {
		return nil, fmt.Errorf("models: load: %w: %d parameters for a %s that has %.0f", ErrCorruptFile, len(p.Params)/4, p.Arch.Name, want)
	}
	var m Model
	a := p.Arch
	switch a.Name {
	case "logistic":
		m, err = NewLogistic(a.Input, a.Classes, 0)
	case "mlp":
		var act nn.Activation
		if act, err = activation(a.Activation); err == nil {
			m, err = NewMLP(a.Input, a.Hidden, a.Classes, act, 0)
		}
	case "cifarcnn":
		m, err = NewCIFARCNN(a.Input, a.Classes, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("models: load: %w: %v", ErrCorruptFile, dpcore.Within("models", err))
	}
	return fill(m, p.Meta, p.Params)
}

// numParams is the number of parameters of a version-1 architecture,
// computed in float64 so that no corrupt (or hostile) description can
// overflow it, or an error for a description that is out of range;
// loadV1 compares it with the parameters present before it allocates
// anything.
func (a archV1) numParams() (float64, error) {
	size := 1.0
	for _, d := range a.Input {
		if d <= 0 || d > 1<<20 {
			return 0, fmt.Errorf("input shape %v", a.Input)
		}
		size *= float64(d)
	}
	if a.Classes < 2 || a.Classes > 1<<20 {
		return 0, fmt.Errorf("%d classes", a.Classes)
	}
	if len(a.Hidden) > 1<<10 {
		return 0, fmt.Errorf("%d hidden layers", len(a.Hidden))
	}
	k := float64(a.Classes)
	switch a.Name {
	case "logistic":
		return (size + 1) * k, nil
	case "mlp":
		n, prev := 0.0, size
		for _, h := range a.Hidden {
			if h <= 0 {
				return 0, fmt.Errorf("hidden width %d", h)
			}
			n += (prev + 1) * float64(h)
			prev = float64(h)
		}
		return n + (prev+1)*k, nil
	case "cifarcnn":
		n, c := 0.0, float64(a.Input[0])
		for _, out := range []float64{32, 64, 128} {
			n += (9*c+1)*out + (9*out+1)*out
			c = out
		}
		flat := float64(a.Input[1]/8) * float64(a.Input[2]/8) * 128
		return n + (flat+1)*128 + (128+1)*k, nil
	}
	return 0, fmt.Errorf("version 1 architecture %q is not known to this build (want logistic, mlp or cifarcnn); retrain the model to write a version 2 file", a.Name)
}
