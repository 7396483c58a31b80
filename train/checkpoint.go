package train

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/vmihailenco/msgpack/v5"
)

// runID fingerprints what must not change across a resume: the plan's
// privacy-relevant fields and the shapes.
func (t *Trainer) runID() string {
	h := sha256.New()
	fmt.Fprintf(h, "model=%s params=%d steps=%d batch=%d examples=%d clip=%g lr=%g mom=%g cool=%g private=%v",
		t.backend.Name(), len(t.engine.Params()), t.cfg.Privacy.Steps, t.cfg.Privacy.Batch, t.cfg.Data.Train.Len(), t.cfg.Privacy.ClipNorm,
		t.cfg.Optimizer.LearningRate, t.cfg.Optimizer.Momentum, t.cfg.Optimizer.CooldownFrac, !t.cfg.NonPrivate)
	if ema := t.cfg.Optimizer.EMA; ema != nil || t.cfg.Data.Features != FeaturesPixels {
		decay := 0.0
		if ema != nil {
			decay = ema.Decay
		}
		fmt.Fprintf(h, " ema=%g features=%s", decay, t.cfg.Data.Features)
	}
	if w := t.cfg.Optimizer.Warmup; w != nil {
		fmt.Fprintf(h, " warmup=%d", w.Steps)
	}
	if t.plan != nil {
		fmt.Fprintf(h, " mech=%s sampling=%s sigma=%v std=%v", t.plan.Mechanism, t.plan.Sampling, t.plan.NoiseMultiplier, t.plan.NoiseStd)
	}
	if t.users != nil {
		fmt.Fprintf(h, " unit=user users=%d k=%d mean=%v", t.users.users.Len(), t.users.k, t.users.mean)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// SaveCheckpoint writes the run's complete state atomically (package
// atomicfile), so a kill at any moment leaves either the old or the new
// checkpoint, never a torn one.
func (t *Trainer) SaveCheckpoint(path string) error {
	if t.broken != nil {
		return fmt.Errorf("train: checkpoint: %w", t.broken)
	}
	if err := t.checkInStep(t.Step()); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	return t.saveCheckpoint(path)
}

// saveCheckpoint writes the state as it stands, unchecked.
func (t *Trainer) saveCheckpoint(path string) error {
	var ck checkpointState
	var err error
	ck.Step, ck.RunID, ck.Epsilon, ck.AugmentSeed = t.Step(), t.runID(), t.eps, t.augment.Seed
	for _, h := range t.hooks {
		if s, ok := h.(stateful); ok {
			s.saveState(&ck)
		}
	}
	if t.dataDigest == nil {
		// A run without Output.CheckpointPath on pixels: its data are
		// still as given (trainer.go, New).
		t.recordData(t.cfg.Data.Train)
	}
	ck.Settings, ck.SeedFingerprint, ck.DataSalt, ck.DataDigest = t.settings, t.seedFP, t.dataSalt, t.dataDigest
	var mb bytes.Buffer
	if err := t.backend.Save(&mb); err != nil {
		return fmt.Errorf("train: checkpoint: model: %w", err)
	}
	ck.ModelState = mb.Bytes()
	if ck.OptimizerState, err = t.opt.MarshalBinary(); err != nil {
		return fmt.Errorf("train: checkpoint: optimizer: %w", err)
	}
	if ck.Sampler, err = t.sampler.MarshalBinary(); err != nil {
		return fmt.Errorf("train: checkpoint: sampler: %w", err)
	}
	if t.noise != nil {
		if ck.Noise, err = t.noise.MarshalBinary(); err != nil {
			return fmt.Errorf("train: checkpoint: noise: %w", err)
		}
	}
	if t.plan != nil {
		if ck.Plan, err = json.Marshal(t.plan); err != nil {
			return fmt.Errorf("train: checkpoint: plan: %w", err)
		}
	}
	payload, err := msgpack.Marshal(&ck)
	if err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	if err := (atomicfile.Options{Pause: t.cfg.Output.slowWrite}).WriteSealed(path, checkpointMagic, checkpointVersion, payload); err != nil {
		return fmt.Errorf("train: checkpoint: %w", err)
	}
	return nil
}

// loadCheckpoint reads the checkpoint at path and restores the run
// from it.
func (t *Trainer) loadCheckpoint(path string) error {
	ck, err := readCheckpoint(path)
	if err != nil {
		return err
	}
	return t.restore(path, ck)
}

// restore sets the run's state to the checkpoint ck (read from path),
// refusing one of another configuration or whose parts are not at one
// step.
func (t *Trainer) restore(path string, ck *checkpointState) error {
	if ck.RunID != t.runID() {
		return fmt.Errorf("train: checkpoint %s: %w: it belongs to a different configuration", path, ErrCorruptCheckpoint)
	}
	if err := t.backend.Load(bytes.NewReader(ck.ModelState)); err != nil {
		return fmt.Errorf("train: checkpoint: model: %w", err)
	}
	if err := t.opt.UnmarshalBinary(ck.OptimizerState); err != nil {
		return fmt.Errorf("train: checkpoint: optimizer: %w", err)
	}
	if err := t.sampler.UnmarshalBinary(ck.Sampler); err != nil {
		return fmt.Errorf("train: checkpoint: sampler: %w", err)
	}
	if t.noise != nil {
		if err := t.noise.UnmarshalBinary(ck.Noise); err != nil {
			return fmt.Errorf("train: checkpoint: noise: %w", err)
		}
	}
	if err := t.checkInStep(ck.Step); err != nil {
		return fmt.Errorf("train: checkpoint %s: %w: %w", path, ErrCorruptCheckpoint, err)
	}
	for _, h := range t.hooks {
		if s, ok := h.(stateful); ok {
			if err := s.loadState(ck); err != nil {
				return fmt.Errorf("train: checkpoint %s: %w: %w", path, ErrCorruptCheckpoint, err)
			}
		}
	}
	t.eps, t.augment.Seed = ck.Epsilon, ck.AugmentSeed
	return nil
}

// checkInStep verifies that the sampler, the noise source and the
// optimizer have all done exactly step steps: batch i must meet noise row
// i, or an example's participations land outside the schema the
// sensitivity was computed for.
func (t *Trainer) checkInStep(step int) error {
	if s := t.sampler.Step(); s != step {
		return fmt.Errorf("sampler at step %d, checkpoint at step %d", s, step)
	}
	if t.noise != nil {
		if s := t.noise.Step(); s != step {
			return fmt.Errorf("noise source at step %d, checkpoint at step %d", s, step)
		}
	}
	if s := t.opt.StepIndex(); s != step {
		return fmt.Errorf("optimizer at step %d, checkpoint at step %d", s, step)
	}
	return nil
}

// checkResume reads the checkpoint at path (if there is one), keeps it
// for New to restore (t.resumeFrom), and compares it with the
// run, before the plan is built: a resume with other settings, another
// seed (or none where it had one, or the reverse) or other training data
// is refused at once, naming each difference. It also sets the data
// digest the run's checkpoints will carry, under the checkpoint's salt
// when resuming. (A run without Output.CheckpointPath records it in New
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
	t.resumeFrom, t.dataSalt = ck, ck.DataSalt
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
