package privacy

import (
	"bytes"
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// BuildDense builds mech for workload w under the participation schema
// as dense matrices (the encoder and decoder a continual release computes
// with exactly, package aggregate), with the default build options.
func BuildDense(ctx context.Context, mech Mechanism, w dpcore.Workload, schema dpcore.Schema) (dpcore.Strategy, error) {
	if mech == nil {
		return nil, invalidf("build: no mechanism")
	}
	f, err := mfnoise.BuildDense(ctx, mech, w, schema, mfnoise.BuildOptions{})
	if err != nil {
		return nil, fmt.Errorf("privacy: mechanism %s: %w", mech, err)
	}
	return f, nil
}

// EncodeStrategy is the dense form of s in the factorization file format
// (docs/files.md), for a store that keeps the mechanism its noise was made
// with.
func EncodeStrategy(s dpcore.Strategy) ([]byte, error) {
	f, err := mfnoise.Dense(s)
	if err != nil {
		return nil, fmt.Errorf("privacy: %w", err)
	}
	var buf bytes.Buffer
	if err := mfnoise.SaveFactorization(&buf, f); err != nil {
		return nil, fmt.Errorf("privacy: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeStrategy reads what EncodeStrategy wrote: the strategy and the
// workload it decodes.
func DecodeStrategy(b []byte) (dpcore.Strategy, dpcore.Workload, error) {
	f, err := mfnoise.LoadFactorization(bytes.NewReader(b))
	if err != nil {
		return nil, dpcore.Workload{}, fmt.Errorf("privacy: %w", err)
	}
	return f, f.Workload, nil
}
