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
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// The checkpoint file: its record (checkpointState), the settings it
// records so that a resume with other settings is refused by name, and
// reading it.

// A checkpoint is the msgpack of checkpointState in the checksummed envelope
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
	// Average holds the averaged parameters and EMASteps the updates
	// they have seen, written and read by the average's own hook; absent
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
	if s := dpcore.DeriveSeed(seed, "checkpoint seed fingerprint"); s != nil {
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

// setting is one configuration value a checkpoint records, so that a
// resume with other flags is refused before any expensive work, naming
// each setting that differs.
type setting struct {
	Name  string `msgpack:"name"`
	Value string `msgpack:"value"`
}

func orAuto(s string) string {
	if s == "" || s == "0" {
		return "auto"
	}
	return s
}

// Values of the "seed" setting.
const (
	seedNone  = "none (crypto/rand)"
	seedGiven = "given"
)

// seedSetting records whether the run's generators (sampler, noise,
// initialization, augmentation) come from a caller's seed or from
// crypto/rand: a checkpoint continues its generators, so a resume that
// changes this would make the run's claim about its noise false.
func seedSetting(seed []byte) setting {
	if seed == nil {
		return setting{"seed", seedNone}
	}
	return setting{"seed", seedGiven}
}

func find(s []setting, name string) (setting, bool) {
	for _, v := range s {
		if v.Name == name {
			return v, true
		}
	}
	return setting{}, false
}

// unsetValue is what a checkpoint's silence about a setting that
// settings records only when set means: its run used the default. It is
// false for a setting recorded always, which only a checkpoint of an
// earlier version lacks.
func unsetValue(name string) (string, bool) {
	switch name {
	case "features":
		return string(FeaturesPixels), true
	case "parameter average":
		return "none", true
	case "augment multiplicity":
		return "1", true
	case "unit of privacy":
		return "example", true
	case "warm-up steps":
		return "none", true
	}
	return "", false
}

// shown is a setting's value as a message names it ("none" for an empty
// one, such as no per-layer clip).
func shown(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

// diffSettings names every setting whose value differs between the
// checkpoint (have) and the run (want), each in one clause without a
// semicolon (checkResume joins them with "; "). A setting recorded only
// when set and absent on one side is named with its default; one the
// checkpoint lacks because an earlier version wrote it is said to be
// unrecorded, and refused: it cannot be checked.
func diffSettings(have, want []setting) []string {
	hv := map[string]string{}
	for _, s := range have {
		hv[s.Name] = s.Value
	}
	var diffs []string
	seen := map[string]bool{}
	for _, s := range want {
		seen[s.Name] = true
		v, ok := hv[s.Name]
		switch {
		case ok && v == s.Value:
		case ok:
			diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s, asked for %s", s.Name, shown(v), shown(s.Value)))
		default:
			if d, optional := unsetValue(s.Name); optional {
				diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s (its run did not set it), asked for %s", s.Name, d, shown(s.Value)))
			} else {
				diffs = append(diffs, fmt.Sprintf("%s: asked for %s, but the checkpoint (written by an earlier version) does not record it, so it cannot be checked", s.Name, shown(s.Value)))
			}
		}
	}
	for _, s := range have {
		if seen[s.Name] {
			continue
		}
		if d, optional := unsetValue(s.Name); optional {
			diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s, asked for %s (not set in this run)", s.Name, shown(s.Value), d))
		} else {
			diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s, not set in this run", s.Name, shown(s.Value)))
		}
	}
	return diffs
}
