package train

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/vmihailenco/msgpack/v5"
)

// ErrCorruptCheckpoint is wrapped when a checkpoint fails its checksum or
// does not belong to the configured run.
var ErrCorruptCheckpoint = errors.New("corrupt or mismatched checkpoint")

// A checkpoint is the msgpack of checkpoint in the checksummed envelope
// of package atomicfile.
const (
	checkpointMagic   = "dpmf-checkpoint"
	checkpointVersion = 2
)

// checkpoint is the complete state of a run between two steps. The
// generator states inside let whoever holds it reproduce the noise: treat a
// checkpoint as secret as the training data.
type checkpoint struct {
	Step      int     `msgpack:"step"`
	RunID     string  `msgpack:"run_id"`
	Model     []byte  `msgpack:"model"`
	Optimizer []byte  `msgpack:"optimizer"`
	Sampler   []byte  `msgpack:"sampler"`
	Noise     []byte  `msgpack:"noise"`
	Plan      []byte  `msgpack:"plan"` // JSON of the privacy plan: the ledger entry
	Epsilon   float64 `msgpack:"epsilon"`
	// AugmentSeed is kept because a crypto-seeded run cannot re-derive it.
	AugmentSeed uint64 `msgpack:"augment_seed"`
	// EMA is the parameter average (Config.EMA) and EMASteps the updates
	// it has seen; absent without averaging.
	EMA      []float32 `msgpack:"ema,omitempty"`
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
	var ck checkpoint
	var err error
	ck.Step, ck.RunID, ck.Epsilon, ck.AugmentSeed = t.Step(), t.runID(), t.eps, t.augment.Seed
	if t.ema != nil {
		ck.EMA, ck.EMASteps = t.ema.avg, t.ema.steps
	}
	if t.dataDigest == nil {
		// A run without Config.CheckpointPath on pixels: its data are
		// still as given (trainer.go, New).
		t.recordData(t.cfg.Data.Train)
	}
	ck.Settings, ck.SeedFingerprint, ck.DataSalt, ck.DataDigest = t.settings, t.seedFP, t.dataSalt, t.dataDigest
	var mb bytes.Buffer
	if err := t.backend.Save(&mb); err != nil {
		return fmt.Errorf("train: checkpoint: model: %w", err)
	}
	ck.Model = mb.Bytes()
	if ck.Optimizer, err = t.opt.MarshalBinary(); err != nil {
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

func (t *Trainer) loadCheckpoint(path string) error {
	payload, err := atomicfile.ReadSealed(path, checkpointMagic, checkpointVersion)
	if errors.Is(err, atomicfile.ErrCorrupt) {
		return fmt.Errorf("train: checkpoint: %w: %s", ErrCorruptCheckpoint, atomicfile.Reason(err))
	}
	if err != nil {
		return err
	}
	var ck checkpoint
	if err := atomicfile.Unmarshal(payload, &ck); err != nil {
		return fmt.Errorf("train: checkpoint %s: %w: %s", path, ErrCorruptCheckpoint, atomicfile.Reason(err))
	}
	if ck.RunID != t.runID() {
		return fmt.Errorf("train: checkpoint %s: %w: it belongs to a different configuration", path, ErrCorruptCheckpoint)
	}
	if err := t.backend.Load(bytes.NewReader(ck.Model)); err != nil {
		return fmt.Errorf("train: checkpoint: model: %w", err)
	}
	if err := t.opt.UnmarshalBinary(ck.Optimizer); err != nil {
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
	if t.ema != nil {
		if len(ck.EMA) != len(t.ema.avg) || ck.EMASteps != ck.Step {
			return fmt.Errorf("train: checkpoint %s: %w: parameter average of %d values after %d updates, want %d values after %d", path, ErrCorruptCheckpoint, len(ck.EMA), ck.EMASteps, len(t.ema.avg), ck.Step)
		}
		copy(t.ema.avg, ck.EMA)
		t.ema.steps = ck.EMASteps
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
