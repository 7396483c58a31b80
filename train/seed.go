package train

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Every generator of a run has its own seed, derived from the run's seed
// and the generator's label (dpcore.DeriveSeed: "sampler", "noise",
// "model", "augment", "users", "clip-quantile", "audit"), or drawn from
// crypto/rand when the run has none.

// seed32 is the 32-byte seed of the generator label.
func seed32(master []byte, label string) ([32]byte, error) {
	var b [32]byte
	if s := dpcore.DeriveSeed(master, label); s != nil {
		return *s, nil
	}
	if _, err := rand.Read(b[:]); err != nil {
		return b, fmt.Errorf("train: seeding %s: %w", label, err)
	}
	return b, nil
}

// runSeeds are the seeds of a run's generators, derived once from its
// seed when New starts: the sampler's and the noise's (nil: they seed
// themselves from crypto/rand), the model's initialization, the
// augmentation, the per-user example choice and adaptive clipping's count
// noise, and the checkpoint's seed fingerprint (seedFingerprint).
type runSeeds struct {
	sampler, noise  *dpcore.Seed
	model, augment  uint64
	users, quantile [32]byte
	fingerprint     []byte
}

func newRunSeeds(master []byte) (runSeeds, error) {
	s := runSeeds{
		sampler: dpcore.DeriveSeed(master, "sampler"), noise: dpcore.DeriveSeed(master, "noise"),
		fingerprint: seedFingerprint(master),
	}
	var err error
	for _, g := range []struct {
		label string
		dst   *[32]byte
	}{{"users", &s.users}, {"clip-quantile", &s.quantile}} {
		if *g.dst, err = seed32(master, g.label); err != nil {
			return s, err
		}
	}
	if s.model, err = seed64(master, "model"); err != nil {
		return s, err
	}
	s.augment, err = seed64(master, "augment")
	return s, err
}

// seed64 is a 64-bit seed of the generator label.
func seed64(master []byte, label string) (uint64, error) {
	b, err := seed32(master, label)
	return binary.LittleEndian.Uint64(b[:8]), err
}
