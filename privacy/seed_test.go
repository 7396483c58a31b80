package privacy

import (
	"encoding/hex"
	"testing"
)

func TestSeedBits(t *testing.T) {
	// 32 bytes drawn once from crypto/rand.
	raw, _ := hex.DecodeString("7cfcadc056e17ba31878145b515a63f1096e22b94f2128226545edf15b466cf2")
	cases := []struct {
		seed   string
		strong bool
	}{
		{"test seed", false},
		{"example", false},
		{"012345678901234567890123456789", false}, // 30 digits: 99.7 bits
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{hex.EncodeToString(raw), true},
		{string(raw), true},
	}
	for _, c := range cases {
		got := SeedBits([]byte(c.seed)) >= MinSeedBits
		t.Logf("%q: %.1f bits", c.seed, SeedBits([]byte(c.seed)))
		if got != c.strong {
			t.Errorf("%q: %.1f bits, strong = %v, want %v", c.seed, SeedBits([]byte(c.seed)), got, c.strong)
		}
	}
}
