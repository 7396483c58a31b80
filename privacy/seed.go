package privacy

import (
	"fmt"
	"math"
)

// MinSeedBits is the entropy below which a seed is refused for a private
// run unless the caller asks for an insecure experiment: anyone who can
// guess the seed can reproduce, and subtract, the noise.
const MinSeedBits = 128

// SeedBits is an upper bound on the entropy of seed in bits: its length
// times the bits per symbol of the smallest alphabet its bytes are drawn
// from (decimal digits, hexadecimal digits, lower- or upper-case letters,
// letters and digits, base64, printable ASCII, any byte), and no more than
// log2 of twice the number of distinct bytes per symbol, which catches
// repetition ("aaaa..."). It bounds what the seed could carry, not what it
// does carry: a long guessable phrase passes. 32 bytes from crypto/rand,
// raw or hex encoded, have well over 128 bits by this measure; "test seed"
// has at most 30.
func SeedBits(seed []byte) float64 {
	if len(seed) == 0 {
		return 0
	}
	var seen [256]bool
	distinct := 0
	digit, hex, lower, upper, alnum, b64, printable := true, true, true, true, true, true, true
	for _, c := range seed {
		if !seen[c] {
			seen[c] = true
			distinct++
		}
		isDigit := c >= '0' && c <= '9'
		isLower := c >= 'a' && c <= 'z'
		isUpper := c >= 'A' && c <= 'Z'
		digit = digit && isDigit
		hex = hex && (isDigit || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')
		lower = lower && (isLower || c == ' ')
		upper = upper && (isUpper || c == ' ')
		alnum = alnum && (isDigit || isLower || isUpper)
		b64 = b64 && (isDigit || isLower || isUpper || c == '+' || c == '/' || c == '-' || c == '_' || c == '=')
		printable = printable && c >= 0x20 && c < 0x7f
	}
	alphabet := 256.0
	switch {
	case digit:
		alphabet = 10
	case hex:
		alphabet = 16
	case lower, upper:
		alphabet = 27 // letters and space
	case alnum:
		alphabet = 62
	case b64:
		alphabet = 65
	case printable:
		alphabet = 95
	}
	per := math.Min(math.Log2(alphabet), math.Log2(2*float64(distinct)))
	return float64(len(seed)) * per
}

// Noise-origin assumptions: exactly one of them is recorded for a run.
const (
	AssumeCSPRNG = "noise generator: ChaCha8 seeded from crypto/rand, a secret no one holds"
	AssumeSeeded = "noise generator: seeded by the caller; the noise is reproducible from the seed, which is not a CSPRNG secret: the guarantee holds only against those who do not have it"
)

// NoiseAssumptions states where a run's noise comes from: crypto/rand when
// seed is nil, else the caller's seed. A seed of fewer than MinSeedBits
// bits (SeedBits) is refused unless insecure is set, and then the run is
// recorded as an insecure experiment.
func NoiseAssumptions(seed []byte, insecure bool) ([]string, error) {
	if seed == nil {
		return []string{AssumeCSPRNG}, nil
	}
	bits := SeedBits(seed)
	if bits >= MinSeedBits {
		return []string{AssumeSeeded}, nil
	}
	if !insecure {
		return nil, refuse(RuleSeed, "the seed carries at most %.0f bits, fewer than %d, so anyone who guesses it can reproduce the noise: omit it for crypto/rand noise, use 32 random bytes, or ask for an insecure experiment (InsecureSeed, -insecure-seed)", bits, MinSeedBits)
	}
	return []string{AssumeSeeded, fmt.Sprintf("INSECURE experiment: the seed carries at most %.0f bits (< %d); the guarantee does not hold against anyone who can guess it", bits, MinSeedBits)}, nil
}
