package dpcore

import "crypto/sha256"

// Seed is the key of a reproducible generator (sampler, noise, model
// initialization, audit): 32 bytes, so no length is checked at run time.
// Everywhere a *Seed is taken, nil means a key drawn from crypto/rand: the
// default, and what privacy requires. A seed is used only when asked for,
// and the run's claim then says so.
type Seed [32]byte

// DeriveSeed gives each consumer of a run's randomness (label: "sampler",
// "noise", "model", ...) its own seed from the run's seed master (any
// length: a phrase is parsed at the edge), as SHA-256(master, 0, label);
// nil (crypto/rand) when the run has none.
func DeriveSeed(master []byte, label string) *Seed {
	if master == nil {
		return nil
	}
	h := sha256.New()
	h.Write(master)
	h.Write([]byte{0})
	h.Write([]byte(label))
	var s Seed
	h.Sum(s[:0])
	return &s
}

// SeedOf returns b as a seed when it has exactly 32 bytes (a -seed flag
// given in hex), else false.
func SeedOf(b []byte) (*Seed, bool) {
	if len(b) != len(Seed{}) {
		return nil, false
	}
	s := Seed(b)
	return &s, true
}
