package aggregate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/noise"
	bolt "go.etcd.io/bbolt"
)

// Mechanism is what the aggregator needs from a correlated-noise mechanism
// for a workload A: a stream of unit-scale gradient-space noise W (so that
// A (X + s W) = A X + s B Z is the mechanism's release, SPEC 6) and the L2
// sensitivity of its encoder under the participation schema, for clip norm
// 1. Implementations must be safe to call from one goroutine at a time.
type Mechanism interface {
	// Name is the mechanism's canonical name, e.g. "tree-online".
	Name() string
	// Workload is the workload A the noise is decoded for; its N is the
	// horizon.
	Workload() mfnoise.Workload
	// Schema is the participation schema the sensitivity is for.
	Schema() mfnoise.Schema
	// Sensitivity is sens(C) under Schema for the whole horizon.
	Sensitivity() dpcore.SensitivityResult
	// PrefixSensitivity is an upper bound on the sensitivity of the first
	// t releases alone, nondecreasing in t and at most Sensitivity().Value.
	// The ledger turns it into the epsilon spent so far.
	PrefixSensitivity(ctx context.Context, t int) (float64, error)
	// NewNoise returns a fresh unit-scale noise source of dimension d.
	NewNoise(d int, opt noise.Options) (noise.Source, error)
}

// FactorizationMechanism is a Mechanism over an mfnoise.Factorization A = BC.
type FactorizationMechanism struct {
	name   string
	f      *mfnoise.Factorization
	schema mfnoise.Schema
	sens   dpcore.SensitivityResult
}

// NewFactorizationMechanism wraps f under the participation schema.
func NewFactorizationMechanism(name string, f *mfnoise.Factorization, schema mfnoise.Schema) (*FactorizationMechanism, error) {
	if f == nil {
		return nil, fmt.Errorf("aggregate: %w: nil factorization", ErrInvalidConfig)
	}
	sens, err := f.Sensitivity(schema)
	if err != nil {
		return nil, fmt.Errorf("aggregate: mechanism %s: sensitivity under %s: %w", name, schema, err)
	}
	if !(sens.Value > 0) || math.IsInf(sens.Value, 0) {
		return nil, fmt.Errorf("aggregate: mechanism %s: sensitivity %v under %s is not a positive number", name, sens.Value, schema)
	}
	return &FactorizationMechanism{name: name, f: f, schema: schema, sens: sens}, nil
}

// BuildMechanism builds mechanism m (e.g. parsed by privacy.ParseMechanism:
// dpsgd, tree-online, tree-full, bandmf:BANDS, ...) densely for workload w
// and the schema.
func BuildMechanism(ctx context.Context, m mfnoise.Mechanism, w mfnoise.Workload, schema mfnoise.Schema) (*FactorizationMechanism, error) {
	// The dense encoder and decoder (m x n each, m <= 2n for trees) are
	// the largest allocation; refuse sizes that cannot fit.
	if need := 4 * 8 * int64(w.N) * int64(w.N); w.N > 0 && need > maxMechanismBytes {
		return nil, fmt.Errorf("aggregate: %w: horizon %d needs about %.1f GiB for the mechanism's dense encoder and decoder (limit %.0f GiB)",
			ErrInvalidConfig, w.N, float64(need)/(1<<30), float64(maxMechanismBytes)/(1<<30))
	}
	f, err := mfnoise.BuildDense(ctx, m, w, schema, mfnoise.BuildOptions{})
	if err != nil {
		return nil, fmt.Errorf("aggregate: %w", err)
	}
	return NewFactorizationMechanism(m.String(), f, schema)
}

// maxMechanismBytes bounds the dense matrices BuildMechanism will make.
const maxMechanismBytes = 8 << 30

// Name implements Mechanism.
func (m *FactorizationMechanism) Name() string { return m.name }

// Workload implements Mechanism.
func (m *FactorizationMechanism) Workload() mfnoise.Workload { return m.f.Workload }

// Schema implements Mechanism.
func (m *FactorizationMechanism) Schema() mfnoise.Schema { return m.schema }

// Sensitivity implements Mechanism.
func (m *FactorizationMechanism) Sensitivity() dpcore.SensitivityResult { return m.sens }

// Factorization is the underlying factorization.
func (m *FactorizationMechanism) Factorization() *mfnoise.Factorization { return m.f }

// NewNoise implements Mechanism.
func (m *FactorizationMechanism) NewNoise(d int, opt noise.Options) (noise.Source, error) {
	return noise.New(m.f, d, opt)
}

// PrefixSensitivity implements Mechanism (mfnoise.PrefixSensitivity).
func (m *FactorizationMechanism) PrefixSensitivity(ctx context.Context, t int) (float64, error) {
	s, err := mfnoise.PrefixSensitivity(ctx, m.f, m.schema, t, m.sens.Value)
	if err != nil {
		return 0, fmt.Errorf("aggregate: %s: %w", m.name, err)
	}
	return s, nil
}

// StoredMechanism returns the factorization mechanism saved in the store at
// path when it was created, under the schema, or nil if there is no store
// or it holds none. Reopening with it skips rebuilding (minutes for the
// optimized mechanisms at large horizons) and guarantees the encoder the
// stored noise state was made with, bit for bit.
func StoredMechanism(path string, schema mfnoise.Schema) (_ *FactorizationMechanism, err error) {
	defer recoverCorrupt(path, &err)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	db, err := openBolt(path, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var name string
	var f *mfnoise.Factorization
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil || meta.Get(keyMech) == nil {
			return nil
		}
		nb, err := unseal("mechanism name", meta.Get(keyMechName))
		if err != nil {
			return err
		}
		fb, err := unseal("mechanism", meta.Get(keyMech))
		if err != nil {
			return err
		}
		name = string(nb)
		f, err = mfnoise.LoadFactorization(bytes.NewReader(fb))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("aggregate: stored mechanism in %s: %w", path, err)
	}
	if f == nil {
		return nil, nil
	}
	return NewFactorizationMechanism(name, f, schema)
}
