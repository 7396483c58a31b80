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

// seed64 is a 64-bit seed of the generator label.
func seed64(master []byte, label string) (uint64, error) {
	b, err := seed32(master, label)
	return binary.LittleEndian.Uint64(b[:8]), err
}
