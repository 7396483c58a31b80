package train

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

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
	if !c.NonPrivate && c.Mechanism != nil {
		mech = fmt.Sprint(c.Mechanism)
	}
	noise := fmt.Sprintf("epsilon %g", c.Epsilon)
	if c.NoiseMultiplier > 0 {
		noise = fmt.Sprintf("sigma %g", c.NoiseMultiplier)
	}
	s := []setting{
		{"model", fmt.Sprintf("%s (%d parameters)", m.Name(), m.NumParams())},
		{"training examples", fmt.Sprint(c.Train.Len())},
		{"steps", fmt.Sprint(c.Steps)},
		{"batch", fmt.Sprint(c.Batch)},
		{"mechanism", mech},
		{"noise", noise},
		{"delta", fmt.Sprintf("%g", c.Delta)},
		{"accountant", string(c.Accountant)},
		{"workload", string(c.Workload)},
		{"sampling", orAuto(string(c.Sampling))},
		{"bands", orAuto(fmt.Sprint(c.Bands))},
		{"clip norm", fmt.Sprintf("%g", c.ClipNorm)},
		{"per-layer clip", strings.Trim(fmt.Sprint(c.ClipPerLayer), "[]")},
		{"learning rate", fmt.Sprintf("%g", c.LearningRate)},
		{"momentum", fmt.Sprintf("%g", c.Momentum)},
		{"cooldown fraction", fmt.Sprintf("%g", c.CooldownFrac)},
		{"augment", fmt.Sprint(c.Augment)},
	}
	if c.NonPrivate {
		s = s[:5]
		s = append(s, setting{"learning rate", fmt.Sprintf("%g", c.LearningRate)},
			setting{"momentum", fmt.Sprintf("%g", c.Momentum)}, setting{"cooldown fraction", fmt.Sprintf("%g", c.CooldownFrac)})
	}
	// Recorded only when set, so checkpoints of runs without them resume.
	if c.Features != FeaturesPixels {
		s = append(s, setting{"features", string(c.Features)})
	}
	if c.EMA > 0 {
		s = append(s, setting{"parameter average", fmt.Sprintf("%g", c.EMA)})
	}
	if c.multiplicity() > 1 {
		s = append(s, setting{"augment multiplicity", fmt.Sprint(c.multiplicity())})
	}
	if c.UserLevel {
		// Recorded only at user level, so example-level checkpoints keep
		// their settings.
		s = append(s, setting{"unit of privacy", fmt.Sprintf("user (at most %d examples a step, mean %v)", c.UserExamples, c.UserMean)})
	}
	return s
}

func orAuto(s string) string {
	if s == "" || s == "0" {
		return "auto"
	}
	return s
}

// checkResumeSettings compares the configuration recorded in the
// checkpoint at path (if there is one) with c, before the plan is built:
// a resume with other settings is refused at once, naming each setting
// that differs with both values. A checkpoint without recorded settings
// (written by an older version) is left to the full check when it is
// loaded.
func checkResumeSettings(path string, want []setting) error {
	payload, err := atomicfile.ReadSealed(path, checkpointMagic, checkpointVersion)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if errors.Is(err, atomicfile.ErrCorrupt) {
		return fmt.Errorf("train: checkpoint %s: %w: %s", path, ErrCorruptCheckpoint, atomicfile.Reason(err))
	}
	if err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	var ck checkpoint
	if err := atomicfile.Unmarshal(payload, &ck); err != nil {
		return fmt.Errorf("train: checkpoint %s: %w: %s", path, ErrCorruptCheckpoint, atomicfile.Reason(err))
	}
	if len(ck.Settings) == 0 {
		return nil
	}
	return diffSettings(path, ck.Settings, want)
}

// diffSettings names every setting whose value differs between the
// checkpoint (have) and the run (want).
func diffSettings(path string, have, want []setting) error {
	hv := map[string]string{}
	for _, s := range have {
		hv[s.Name] = s.Value
	}
	var diffs []string
	seen := map[string]bool{}
	for _, s := range want {
		seen[s.Name] = true
		if v, ok := hv[s.Name]; !ok || v != s.Value {
			if !ok {
				v = "(not recorded)"
			}
			diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s, asked for %s", s.Name, v, s.Value))
		}
	}
	for _, s := range have {
		if !seen[s.Name] {
			diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s, not set in this run", s.Name, s.Value))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("train: checkpoint %s: %w: it belongs to a different configuration (%s); resume with the flags it was written with, or use another -checkpoint path",
		path, ErrCorruptCheckpoint, strings.Join(diffs, "; "))
}
