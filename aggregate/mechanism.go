package aggregate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	bolt "go.etcd.io/bbolt"
)

// Mechanism is the correlated-noise mechanism of an aggregator: a named
// factorization A = B C of the workload (SPEC 6), built for a
// participation schema. The planner (privacy.PlanRelease) computes its
// encoder's sensitivity, and the exact release reads its matrices.
type Mechanism interface {
	// Name is the mechanism's canonical name, e.g. "tree-online".
	Name() string
	// Schema is the participation schema the mechanism was built for.
	Schema() dpcore.Schema
	// Factorization is A = B C; its workload's N is the horizon.
	Factorization() *mfnoise.Factorization
}

// FactorizationMechanism is a Mechanism over an mfnoise.Factorization A = BC.
type FactorizationMechanism struct {
	name   string
	f      *mfnoise.Factorization
	schema dpcore.Schema
}

// NewFactorizationMechanism wraps f, built for the participation schema.
func NewFactorizationMechanism(name string, f *mfnoise.Factorization, schema dpcore.Schema) (*FactorizationMechanism, error) {
	if f == nil {
		return nil, invalidf("nil factorization")
	}
	return &FactorizationMechanism{name: name, f: f, schema: schema}, nil
}

// BuildMechanism builds the mechanism named by spec (any kind of
// mfnoise.Build: dpsgd, tree-online, tree-full, bandmf:BANDS, ...) for
// workload w and the schema.
func BuildMechanism(ctx context.Context, spec mfnoise.MechanismSpec, w dpcore.Workload, schema dpcore.Schema) (*FactorizationMechanism, error) {
	// The dense encoder and decoder (m x n each, m <= 2n for trees) are
	// the largest allocation; refuse sizes that cannot fit.
	if need := 4 * 8 * int64(w.N) * int64(w.N); w.N > 0 && need > maxMechanismBytes {
		return nil, invalidf("horizon %d needs about %.1f GiB for the mechanism's dense encoder and decoder (limit %.0f GiB)",
			w.N, float64(need)/(1<<30), float64(maxMechanismBytes)/(1<<30))
	}
	f, err := mfnoise.Build(ctx, spec, w, schema, mfnoise.BuildOptions{})
	if err != nil {
		return nil, fmt.Errorf("aggregate: %w", err)
	}
	return NewFactorizationMechanism(spec.String(), f, schema)
}

// maxMechanismBytes bounds the dense matrices BuildMechanism will make.
const maxMechanismBytes = 8 << 30

// Name implements Mechanism.
func (m *FactorizationMechanism) Name() string { return m.name }

// Workload is the workload A the noise is decoded for; its N is the
// horizon.
func (m *FactorizationMechanism) Workload() dpcore.Workload { return m.f.Workload }

// Schema implements Mechanism.
func (m *FactorizationMechanism) Schema() dpcore.Schema { return m.schema }

// Factorization implements Mechanism.
func (m *FactorizationMechanism) Factorization() *mfnoise.Factorization { return m.f }

// StoredMechanism returns the factorization mechanism saved in the store at
// path when it was created, under the schema, or nil if there is no store
// or it holds none. Reopening with it skips rebuilding (minutes for the
// optimized mechanisms at large horizons) and guarantees the encoder the
// stored noise state was made with, bit for bit.
func StoredMechanism(path string, schema dpcore.Schema) (_ *FactorizationMechanism, err error) {
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
