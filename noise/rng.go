package noise

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	mrand "math/rand/v2"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Randomness layout of the noise sources.
//
// Noise row j (1-based; row j of Z, the z_j of SPEC 6) is cut into shards of
// shardLen coordinates. Shard s of row j is drawn from its own ChaCha8
// stream, seeded with SHA-256(rowKey_j, s). Row keys come from a one-way
// chain: chain_1 = seed, chain_{j+1} = SHA-256("chain", chain_j), rowKey_j =
// SHA-256("row", chain_j). Consequences:
//   - any z_j can be regenerated from (seed, j) alone, which the
//     regenerating sources and the exactness tests rely on;
//   - shards are independent streams, so generation parallelizes over cores
//     and the result does not depend on the number of workers (shard
//     boundaries depend only on the coordinate index);
//   - a source that no longer needs past rows keeps only the current chain
//     value, from which past rows cannot be recomputed (a leaked checkpoint
//     does not reveal the noise of earlier, already released steps beyond
//     what the mechanism's own buffers hold).

// shardLen is the number of coordinates drawn from one ChaCha8 stream. It is
// part of the noise definition: changing it changes every z.
const shardLen = 1 << 15

type key [32]byte

func hashKey(domain string, k key, extra uint64) key {
	var buf [64]byte
	n := copy(buf[:], domain)
	n += copy(buf[n:], k[:])
	binary.LittleEndian.PutUint64(buf[n:], extra)
	return sha256.Sum256(buf[:n+8])
}

// The domain strings keep the name of the package the sources came from
// (mfnoise): they fix the noise a seed gives, which resumed checkpoints
// and reproducible runs rely on.

// chainNext advances the one-way key chain by one noise row.
func chainNext(c key) key { return hashKey("mfnoise/v1/chain", c, 0) }

// rowKeyOf is the key of the noise row whose chain value is c.
func rowKeyOf(c key) key { return hashKey("mfnoise/v1/row", c, 0) }

// shardSeed is the ChaCha8 seed of shard s of the row with key rk.
func shardSeed(rk key, s int) [32]byte { return hashKey("mfnoise/v1/shard", rk, uint64(s)) }

// newSeed returns opt's explicit seed or 32 bytes from crypto/rand.
func newSeed(explicit *dpcore.Seed) (key, error) {
	var k key
	if explicit == nil {
		if _, err := rand.Read(k[:]); err != nil {
			return k, fmt.Errorf("noise: seed from crypto/rand: %w", err)
		}
		return k, nil
	}
	return key(*explicit), nil
}

// rowKeys returns the keys of noise rows 1..m for seed, and the chain value
// of row m+1.
func rowKeys(seed key, m int) ([]key, key) {
	ks := make([]key, m)
	c := seed
	for j := range ks {
		ks[j] = rowKeyOf(c)
		c = chainNext(c)
	}
	return ks, c
}

// floatT is the element type of noise vectors: float32 for training,
// float64 for the exactness tests.
type floatT interface{ ~float32 | ~float64 }

// shardRange is the coordinate range [lo, hi) of shard s for dimension d.
func shardRange(s, d int) (int, int) {
	lo := s * shardLen
	return lo, min(lo+shardLen, d)
}

func numShards(d int) int { return (d + shardLen - 1) / shardLen }

// genShard fills dst (the coordinates of shard s) with row rk's standard
// normals, re-seeding the caller's generator (which avoids an allocation per
// shard).
func genShard[T floatT](g *mrand.ChaCha8, rk key, s int, dst []T) {
	g.Seed(shardSeed(rk, s))
	fillNormal(g, dst)
}

// genRow fills dst (length d) with the row's normals, shard by shard. Used by
// tests and by single-shard paths.
func genRow[T floatT](rk key, dst []T) {
	g := mrand.NewChaCha8(key{})
	for s := range numShards(len(dst)) {
		lo, hi := shardRange(s, len(dst))
		genShard(g, rk, s, dst[lo:hi])
	}
}

// Ziggurat for the standard normal (Marsaglia & Tsang 2000) with 256 layers,
// using disjoint bits of one 64-bit ChaCha8 output for the layer index (bits
// 0-7) and the signed uniform (bits 11-63), which avoids the correlation
// Doornik (2005) found in the original 32-bit version. Accept/reject makes it
// exact: its output has the normal law up to the 53-bit resolution of the
// uniform. About 98.8% of draws take the fast path (one multiply and one
// compare).
const (
	zigR = 3.6541528853610088  // start of the tail
	zigV = 4.92867323399000e-3 // area of each layer
	zigN = 256                 // layers
	zigS = 0x1p-52             // scales a signed 53-bit integer to [-1, 1)
	zigU = 0x1p-53             // scales a 53-bit integer to [0, 1)
)

type zigTable struct {
	x [zigN + 1]float64 // x[0] = V/f(R) (pseudo-width of the base strip), x[1] = R, ..., x[256] = 0
	f [zigN + 1]float64 // f[i] = exp(-x[i]^2/2)
}

// zig is read-only after package initialization (a pure computation with no
// side effects).
var zig = makeZigTable()

func makeZigTable() *zigTable {
	t := new(zigTable)
	fR := math.Exp(-0.5 * zigR * zigR)
	t.x[0] = zigV / fR
	t.x[1] = zigR
	for i := 1; i < zigN-1; i++ {
		t.x[i+1] = math.Sqrt(-2 * math.Log(math.Exp(-0.5*t.x[i]*t.x[i])+zigV/t.x[i]))
	}
	t.x[zigN] = 0
	for i := range t.x {
		t.f[i] = math.Exp(-0.5 * t.x[i] * t.x[i])
	}
	return t
}

// fillNormal fills dst with independent standard normals drawn from g.
func fillNormal[T floatT](g *mrand.ChaCha8, dst []T) {
	x, t := &zig.x, zig
	for k := range dst {
		u := g.Uint64()
		i := u & 0xff
		v := float64(int64(u)>>11) * zigS * x[i]
		if math.Abs(v) < x[i+1] {
			dst[k] = T(v)
			continue
		}
		dst[k] = T(t.slow(g, i, v))
	}
}

// slow handles the draws outside the inner rectangle of layer i: the tail
// (i = 0) and the wedges (rejection against the density).
func (t *zigTable) slow(g *mrand.ChaCha8, i uint64, v float64) float64 {
	for {
		if i == 0 {
			// Marsaglia's tail method: exact for |z| > R.
			for {
				a := -math.Log(openUniform(g)) / zigR
				b := -math.Log(openUniform(g))
				if b+b >= a*a {
					if v < 0 {
						return -(zigR + a)
					}
					return zigR + a
				}
			}
		}
		y := t.f[i] + (t.f[i+1]-t.f[i])*float64(g.Uint64()>>11)*zigU
		if y < math.Exp(-0.5*v*v) {
			return v
		}
		// Rejected: a fresh draw from the top.
		u := g.Uint64()
		i = u & 0xff
		v = float64(int64(u)>>11) * zigS * t.x[i]
		if math.Abs(v) < t.x[i+1] {
			return v
		}
	}
}

// openUniform is uniform on (0, 1).
func openUniform(g *mrand.ChaCha8) float64 {
	return (float64(g.Uint64()>>11) + 0.5) * zigU
}
