package train

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// A checkpoint is the msgpack of checkpoint in the checksummed envelope
// of package atomicfile.
const (
	checkpointMagic   = "dpmf-checkpoint"
	checkpointVersion = 2
)

// checkpointState is the complete state of a run between two steps. The
// generator states inside let whoever holds it reproduce the noise: treat a
// checkpoint as secret as the training data.
type checkpointState struct {
	Step           int     `msgpack:"step"`
	RunID          string  `msgpack:"run_id"`
	ModelState     []byte  `msgpack:"model"`
	OptimizerState []byte  `msgpack:"optimizer"`
	Sampler        []byte  `msgpack:"sampler"`
	Noise          []byte  `msgpack:"noise"`
	Plan           []byte  `msgpack:"plan"` // JSON of the privacy plan: the ledger entry
	Epsilon        float64 `msgpack:"epsilon"`
	// AugmentSeed is kept because a crypto-seeded run cannot re-derive it.
	AugmentSeed uint64 `msgpack:"augment_seed"`
	// Average is the parameter average (the optional EMA feature, which
	// writes and reads it) and EMASteps the updates it has seen; absent
	// without averaging. ModelState and OptimizerState are what the
	// backend and the optimizer save.
	Average  []float32 `msgpack:"ema,omitempty"`
	EMASteps int       `msgpack:"ema_steps,omitempty"`
	// Settings are the configuration as given, compared before the plan
	// is built when the run resumes (absent from older checkpoints).
	Settings []setting `msgpack:"settings,omitempty"`
	// SeedFingerprint tells a caller's seed from another (nil for
	// crypto/rand; seedFingerprint), and DataDigest binds the training
	// set, keyed by DataSalt (dataDigest): both absent from older
	// checkpoints.
	SeedFingerprint []byte `msgpack:"seed_fingerprint,omitempty"`
	DataSalt        []byte `msgpack:"data_salt,omitempty"`
	DataDigest      []byte `msgpack:"data_digest,omitempty"`
}

// seedFingerprint tells one caller's seed from another in a checkpoint:
// SHA-256(seed, 0, label) as every generator's seed is derived
// (dpcore.DeriveSeed), one-way, so it reproduces no generator. It adds
// nothing to what the checkpoint already gives (its generator states,
// derived from the same seed, let anyone test a guess of the seed and
// reproduce the noise to come). Nil for crypto/rand: nothing about a
// CSPRNG key is recorded beyond those states.
func seedFingerprint(seed []byte) []byte {
	if s := deriveSeed(seed, "checkpoint seed fingerprint"); s != nil {
		return s[:]
	}
	return nil
}

// dataDigest binds a checkpoint to its training set as given (before any
// feature transform): HMAC-SHA-256 under the checkpoint's random salt of
// the count, shape and classes and of every example, label and owner in
// order (data.Dataset.HashExamples, as a distributed worker's shard
// digest). Keyed, so a digest printed in an error tells nothing about the
// data to anyone without the checkpoint (which is as secret as the data).
func dataDigest(salt []byte, d *data.Dataset) []byte {
	h := hmac.New(sha256.New, salt)
	fmt.Fprintf(h, "dpmf training data v1\nexamples=%d shape=%v classes=%d owners=%v\n", d.Len(), d.Shape, d.Classes, d.Owners != nil)
	d.HashExamples(h, 0, d.Len())
	return h.Sum(nil)
}

// dataSaltBytes is the length of a checkpoint's data-digest salt.
const dataSaltBytes = 32

// readCheckpoint reads and decodes the checkpoint at path.
func readCheckpoint(path string) (*checkpointState, error) {
	payload, err := atomicfile.ReadSealed(path, checkpointMagic, checkpointVersion)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if errors.Is(err, atomicfile.ErrCorrupt) {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s", path, ErrCorruptCheckpoint, atomicfile.Reason(err))
	}
	if err != nil {
		return nil, fmt.Errorf("train: checkpoint: %w", err)
	}
	var ck checkpointState
	if err := atomicfile.Unmarshal(payload, &ck); err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s", path, ErrCorruptCheckpoint, atomicfile.Reason(err))
	}
	return &ck, nil
}

// legacySeed completes the settings of a checkpoint written before the
// seed was recorded: whether it was seeded is read from its plan. When
// that is not known either (a non-private run, or a plan without the
// field), the seed is dropped from want: it cannot be checked.
func legacySeed(ck *checkpointState, run []setting) (have, want []setting) {
	if _, ok := find(ck.Settings, "seed"); ok {
		return ck.Settings, run
	}
	var p struct {
		Seeded *bool `json:"seeded"`
	}
	if len(ck.Plan) > 0 && json.Unmarshal(ck.Plan, &p) == nil && p.Seeded != nil {
		s := setting{"seed", seedNone}
		if *p.Seeded {
			s.Value = seedGiven
		}
		return append(slices.Clip(ck.Settings), s), run
	}
	return ck.Settings, slices.DeleteFunc(slices.Clone(run), func(s setting) bool { return s.Name == "seed" })
}
