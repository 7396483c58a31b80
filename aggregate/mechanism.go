package aggregate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
	bolt "go.etcd.io/bbolt"
)

// NamedStrategy is the correlated-noise mechanism of an aggregator, as
// built: a named strategy A = B C for the workload (SPEC 6), built for a
// participation schema (mfnoise.Mechanism is the typed choice it is built
// from). The planner (privacy.PlanRelease) computes its encoder's
// sensitivity, and the exact release reads its dense matrices.
type NamedStrategy interface {
	// Name is the mechanism's canonical name, e.g. "tree-online".
	Name() string
	// Workload is the workload A the noise is decoded for; its N is the
	// horizon.
	Workload() dpcore.Workload
	// Schema is the participation schema the mechanism was built for.
	Schema() dpcore.Schema
	// Strategy is A = B C.
	Strategy() dpcore.Strategy
}

// StrategyMechanism is a NamedStrategy over a built strategy.
type StrategyMechanism struct {
	name     string
	strategy dpcore.Strategy
	workload dpcore.Workload
	schema   dpcore.Schema
}

// NewStrategyMechanism names strategy s, which decodes workload w and was
// built for the participation schema.
func NewStrategyMechanism(name string, s dpcore.Strategy, w dpcore.Workload, schema dpcore.Schema) (*StrategyMechanism, error) {
	if s == nil {
		return nil, invalidf("mechanism %s: no strategy", name)
	}
	if s.Steps() != w.N {
		return nil, invalidf("mechanism %s has %d steps, its workload %s %d", name, s.Steps(), w, w.N)
	}
	return &StrategyMechanism{name: name, strategy: s, workload: w, schema: schema}, nil
}

// BuildMechanism builds mech (any mechanism of privacy.ParseMechanism
// whose decoder is causal: dpsgd, tree-online, mf-single, bandmf:BANDS,
// ...) densely for workload w and the schema (privacy.BuildDense).
func BuildMechanism(ctx context.Context, mech privacy.Mechanism, w dpcore.Workload, schema dpcore.Schema) (*StrategyMechanism, error) {
	// The dense encoder and decoder (m x n each, m <= 2n for trees) are
	// the largest allocation; refuse sizes that cannot fit.
	if need := 4 * 8 * int64(w.N) * int64(w.N); w.N > 0 && need > maxMechanismBytes {
		return nil, invalidf("horizon %d needs about %.1f GiB for the mechanism's dense encoder and decoder (limit %.0f GiB)",
			w.N, float64(need)/(1<<30), float64(maxMechanismBytes)/(1<<30))
	}
	s, err := privacy.BuildDense(ctx, mech, w, schema)
	if err != nil {
		return nil, fmt.Errorf("aggregate: %w", err)
	}
	return NewStrategyMechanism(mech.String(), s, w, schema)
}

// maxMechanismBytes bounds the dense matrices BuildMechanism will make.
const maxMechanismBytes = 8 << 30

// Name implements Mechanism.
func (m *StrategyMechanism) Name() string { return m.name }

// Workload implements Mechanism.
func (m *StrategyMechanism) Workload() dpcore.Workload { return m.workload }

// Schema implements Mechanism.
func (m *StrategyMechanism) Schema() dpcore.Schema { return m.schema }

// Strategy implements Mechanism.
func (m *StrategyMechanism) Strategy() dpcore.Strategy { return m.strategy }

// StoredMechanism returns the factorization mechanism saved in the store at
// path when it was created, under the schema, or nil if there is no store
// or it holds none. Reopening with it skips rebuilding (minutes for the
// optimized mechanisms at large horizons) and guarantees the encoder the
// stored noise state was made with, bit for bit.
func StoredMechanism(path string, schema dpcore.Schema) (_ *StrategyMechanism, err error) {
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
	var st dpcore.Strategy
	var w dpcore.Workload
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
		st, w, err = privacy.DecodeStrategy(fb)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("aggregate: stored mechanism in %s: %w", path, err)
	}
	if st == nil {
		return nil, nil
	}
	return NewStrategyMechanism(name, st, w, schema)
}
