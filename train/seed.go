package train

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
)

// deriveSeed gives each consumer its own 32-byte seed from the run's seed,
// or nil (crypto/rand) when the run has none.
func deriveSeed(master []byte, label string) *dpcore.Seed { return privacy.DeriveSeed(master, label) }

// seed64 derives a 64-bit seed for label from the run's seed, or draws one
// from crypto/rand when the run has none.
func seed64(master []byte, label string) (uint64, error) {
	if s := deriveSeed(master, label); s != nil {
		return binary.LittleEndian.Uint64(s[:]), nil
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("train: seeding %s: %w", label, err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}
