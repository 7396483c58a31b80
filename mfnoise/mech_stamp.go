package mfnoise

import (
	"context"
	"strconv"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
)

// Stamped runs Inner on blocks of n/Stamps steps (the stamping
// construction, SPEC 5.7): a block-diagonal encoder, built densely, with
// the decoder that suits the inner family (Blocked.StampDecoder).
type Stamped struct {
	Inner  Blocked
	Stamps int
}

func (m Stamped) String() string {
	if m.Inner == nil {
		return "<nil>/s" + strconv.Itoa(m.Stamps)
	}
	return m.Inner.String() + "/s" + strconv.Itoa(m.Stamps)
}

// Structure is the inner mechanism's: a block diagonal of b-banded blocks
// is b-banded.
func (m Stamped) Structure() Structure {
	if m.Inner == nil {
		return Structure{}
	}
	return m.Inner.Structure()
}

// Build stamps the inner mechanism over w.
func (m Stamped) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, opt BuildOptions) (dpcore.Strategy, error) {
	if m.Inner == nil {
		return nil, guard.Invalidf("stamped mechanism without an inner mechanism")
	}
	if m.Stamps < 1 {
		return nil, guard.Invalidf("%v: stamps = %d must be positive", m, m.Stamps)
	}
	if m.Inner.Structure().AutoBands {
		return nil, guard.Invalidf("%v: a band count chosen by the planner cannot be stamped", m)
	}
	f, x, err := buildBlocks(ctx, m.Inner, m.Stamps, m.String(), w, schema, opt)
	if err != nil {
		return nil, err
	}
	return withGram(f, x), nil
}

// NoiseCost is the inner mechanism's, per block.
func (m Stamped) NoiseCost(s dpcore.Strategy, _ int) (float64, string) {
	if c, ok := m.Inner.(Coster); ok {
		return c.NoiseCost(s, m.Stamps)
	}
	return denseCost(s, m.Stamps)
}
