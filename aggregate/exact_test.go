package aggregate

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// TestInt128 checks the 128-bit arithmetic of the encoded sums against
// math/big: products, sums, the overflow refusal and the float64 value.
func TestInt128(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lim := new(big.Int).Lsh(big.NewInt(1), 127)
	for range 2000 {
		var a int128
		want := new(big.Int)
		for range 1 + rng.IntN(8) {
			x, y := rng.Int64()>>rng.IntN(40), rng.Int64()>>rng.IntN(40)
			if rng.IntN(2) == 0 {
				x = -x
			}
			a.mulAdd(x, y)
			want.Add(want, new(big.Int).Mul(big.NewInt(x), big.NewInt(y)))
		}
		zb := make([]byte, 17)
		for i := range zb {
			zb[i] = byte(rng.Uint32())
		}
		z := new(big.Int).Rsh(new(big.Int).SetBytes(zb), uint(rng.IntN(136)))
		if rng.IntN(2) == 0 {
			z.Neg(z)
		}
		sum := new(big.Int).Add(want, z)
		fits := z.BitLen() <= 127 && sum.Cmp(lim) < 0 && sum.Cmp(new(big.Int).Neg(lim)) >= 0
		if ok := a.addBig(z); ok != fits {
			t.Fatalf("%v + %v: addBig says fits = %v, want %v", want, z, ok, fits)
		} else if !ok {
			continue
		}
		b := appendInt128(nil, a)
		got := new(big.Int).SetUint64(a.lo)
		got.Add(got, new(big.Int).Lsh(big.NewInt(a.hi), 64))
		if got.Cmp(sum) != 0 {
			t.Fatalf("sum %v, want %v", got, sum)
		}
		f, _ := new(big.Float).SetInt(sum).Float64()
		if g := int128Float(b); math.Abs(g-f) > 1e-15*math.Abs(f) {
			t.Fatalf("float %v, want %v", g, f)
		}
	}
}

// TestInt128Add64 checks add64 against math/big, near the 128-bit limits
// too: it adds exactly and refuses exactly the sums that overflow.
func TestInt128Add64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	lim := new(big.Int).Lsh(big.NewInt(1), 127)
	for i := range 4000 {
		a := int128{hi: rng.Int64() >> rng.IntN(64), lo: rng.Uint64()}
		switch i % 4 {
		case 0:
			a = int128{hi: math.MaxInt64, lo: math.MaxUint64 - uint64(rng.IntN(4))}
		case 1:
			a = int128{hi: math.MinInt64, lo: uint64(rng.IntN(4))}
		}
		z := rng.Int64() >> rng.IntN(64)
		if rng.IntN(2) == 0 {
			z = -z
		}
		av := new(big.Int).Add(new(big.Int).SetUint64(a.lo), new(big.Int).Lsh(big.NewInt(a.hi), 64))
		sum := new(big.Int).Add(av, big.NewInt(z))
		fits := sum.Cmp(lim) < 0 && sum.Cmp(new(big.Int).Neg(lim)) >= 0
		b := a
		if ok := b.add64(z); ok != fits {
			t.Fatalf("%v + %v: add64 says fits = %v, want %v", av, z, ok, fits)
		} else if !ok {
			if b != a {
				t.Fatal("a refused add64 changed the sum")
			}
			continue
		}
		got := new(big.Int).Add(new(big.Int).SetUint64(b.lo), new(big.Int).Lsh(big.NewInt(b.hi), 64))
		if got.Cmp(sum) != 0 {
			t.Fatalf("%v + %v = %v, want %v", av, z, got, sum)
		}
	}
}

// TestExactRefusesNonCausal: a decoder that reads encoder rows of later
// steps cannot be released from exact encoded sums; Open says so.
func TestExactRefusesNonCausal(t *testing.T) {
	for _, mech := range []string{"tree-full", "fft-opt"} {
		cfg := setup{mech: mech, workload: Workload{Kind: PrefixSum}, n: 8, d: 2, k: 1, b: 1}.config(t)
		_, err := Open(t.Context(), filepath.Join(t.TempDir(), "s.db"), cfg)
		if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "causal") {
			t.Errorf("%s: %v, want dpcore.ErrInvalid naming a causal mechanism", mech, err)
		}
	}
}
