package train

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// setting is one configuration value a checkpoint records, so that a
// resume with other flags is refused before any expensive work, naming
// each setting that differs.
type setting struct {
	Name  string `msgpack:"name"`
	Value string `msgpack:"value"`
}

// settings are the configuration values that must not change across a
// resume, as the user gave them (before the plan is built).
func (c *Config) settings(m interface {
	Name() string
	NumParams() int
}) []setting {
	mech := "none (non-private)"
	if !c.NonPrivate && c.Privacy.Mechanism != nil {
		mech = fmt.Sprint(c.Privacy.Mechanism)
	}
	noise := fmt.Sprintf("epsilon %g", c.Privacy.Epsilon)
	if c.Privacy.NoiseMultiplier > 0 {
		noise = fmt.Sprintf("sigma %g", c.Privacy.NoiseMultiplier)
	}
	s := []setting{
		{"model", fmt.Sprintf("%s (%d parameters)", m.Name(), m.NumParams())},
		{"training examples", fmt.Sprint(c.Data.Train.Len())},
		{"steps", fmt.Sprint(c.Privacy.Steps)},
		{"batch", fmt.Sprint(c.Privacy.Batch)},
		{"mechanism", mech},
		{"noise", noise},
		{"delta", fmt.Sprintf("%g", c.Privacy.Delta)},
		{"accountant", string(c.Privacy.Accountant)},
		{"workload", string(c.Optimizer.Workload)},
		{"sampling", orAuto(string(c.Privacy.Sampling))},
		{"bands", orAuto(fmt.Sprint(c.Privacy.Partitions))},
		{"clip norm", fmt.Sprintf("%g", c.Privacy.ClipNorm)},
		{"per-layer clip", strings.Trim(fmt.Sprint(c.Model.ClipPerLayer), "[]")},
		{"learning rate", fmt.Sprintf("%g", c.Optimizer.LearningRate)},
		{"momentum", fmt.Sprintf("%g", c.Optimizer.Momentum)},
		{"cooldown fraction", fmt.Sprintf("%g", c.Optimizer.CooldownFrac)},
		{"augment", fmt.Sprint(c.Data.Augment != nil)},
	}
	if c.NonPrivate {
		s = s[:5]
		s = append(s, setting{"learning rate", fmt.Sprintf("%g", c.Optimizer.LearningRate)},
			setting{"momentum", fmt.Sprintf("%g", c.Optimizer.Momentum)}, setting{"cooldown fraction", fmt.Sprintf("%g", c.Optimizer.CooldownFrac)})
	}
	// Recorded only when set, so checkpoints of runs without them resume.
	if c.Data.Features != FeaturesPixels {
		s = append(s, setting{"features", string(c.Data.Features)})
	}
	// Each optional feature records its own settings, only when set.
	s = append(s, c.Optimizer.EMA.settings()...)
	s = append(s, c.Data.Augment.settings()...)
	s = append(s, userSettings(c.Privacy.UserBound)...)
	s = append(s, c.Optimizer.Warmup.settings()...)
	return append(s, seedSetting(c.Privacy.Seed))
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

// checkResume compares the checkpoint at path (if there is one) with the
// run, before the plan is built: a resume with other settings, another
// seed (or none where it had one, or the reverse) or other training data
// is refused at once, naming each difference. It also sets the data
// digest the run's checkpoints will carry, under the checkpoint's salt
// when resuming. (A run without Config.CheckpointPath records it in New
// when its data go through a feature transform, else at its first
// SaveCheckpoint: it is always the digest of the data as given.)
//
// A checkpoint written by an older version lacks parts of the record:
// without its settings they are left to the full check when it is loaded;
// without the seed setting, whether it was seeded is read from its plan
// (the plan's "seeded"), and which seed is not checked; without a data
// digest the data are not checked. A non-private checkpoint of an older
// version has no plan, so its seed is not checked either.
func (t *Trainer) checkResume(path string, cfg *Config) error {
	ck, err := readCheckpoint(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.recordData(cfg.Data.Train)
		return nil
	}
	if err != nil {
		return err
	}
	t.dataSalt = ck.DataSalt
	t.recordData(cfg.Data.Train)

	have, want := legacySeed(ck, t.settings)
	var diffs []string
	if len(ck.Settings) > 0 {
		diffs = diffSettings(have, want)
	} else if hs, ok := find(have, "seed"); ok {
		ws, _ := find(want, "seed")
		diffs = diffSettings([]setting{hs}, []setting{ws})
	}
	if ck.SeedFingerprint != nil && t.seedFP != nil && !bytes.Equal(ck.SeedFingerprint, t.seedFP) {
		diffs = append(diffs, "seed: checkpoint has another seed than the one given")
	}
	if ck.DataDigest != nil && !bytes.Equal(ck.DataDigest, t.dataDigest) {
		diffs = append(diffs, fmt.Sprintf("training data differs from the checkpoint's: digest %x vs %x", ck.DataDigest[:min(8, len(ck.DataDigest))], t.dataDigest[:8]))
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("train: checkpoint %s: %w: it belongs to a different configuration (%s); resume with the flags and data it was written with, or use another -checkpoint path",
		path, ErrCorruptCheckpoint, strings.Join(diffs, "; "))
}

// recordData sets the data digest a checkpoint records, under the salt
// read from the checkpoint or, without one, a new random salt.
func (t *Trainer) recordData(d *data.Dataset) {
	if len(t.dataSalt) == 0 {
		t.dataSalt = make([]byte, dataSaltBytes)
		rand.Read(t.dataSalt)
	}
	t.dataDigest = dataDigest(t.dataSalt, d)
}

// readCheckpoint reads and decodes the checkpoint at path.
func readCheckpoint(path string) (*checkpoint, error) {
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
	var ck checkpoint
	if err := atomicfile.Unmarshal(payload, &ck); err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: %w: %s", path, ErrCorruptCheckpoint, atomicfile.Reason(err))
	}
	return &ck, nil
}

// legacySeed completes the settings of a checkpoint written before the
// seed was recorded: whether it was seeded is read from its plan. When
// that is not known either (a non-private run, or a plan without the
// field), the seed is dropped from want: it cannot be checked.
func legacySeed(ck *checkpoint, run []setting) (have, want []setting) {
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
