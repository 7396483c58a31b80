// Package cliptest makes the extreme examples with which every engine's
// tests check the rule of docs/math.md §9.4: one example's or one user's
// data, however large, infinite or undefined, changes nothing in a step's
// control flow and contributes at most the clip norm.
package cliptest

import (
	"math"
	"math/rand/v2"
)

// Kinds are the kinds of extreme example Corrupt makes.
func Kinds() []string { return []string{"huge", "sentinel", "max", "inf", "nan"} }

// Corrupt turns x into an extreme example of the kind, in place: "huge"
// puts one value of 1e30 to the float32 maximum, either sign; "sentinel"
// one 3e38 (a missing-value code of CSV exports); "max" sets every value
// to the float32 maximum, either sign; "inf" one infinity, either sign;
// "nan" one NaN.
func Corrupt(rng *rand.Rand, kind string, x []float32) {
	k := rng.IntN(len(x))
	sign := float32(1 - 2*rng.IntN(2))
	switch kind {
	case "huge":
		x[k] = sign * float32(math.Min(math.Pow(10, 30+8.6*rng.Float64()), math.MaxFloat32))
	case "sentinel":
		x[k] = 3e38
	case "max":
		for j := range x {
			x[j] = float32(math.MaxFloat32) * float32(1-2*rng.IntN(2))
		}
	case "inf":
		x[k] = float32(math.Inf(int(sign)))
	case "nan":
		x[k] = float32(math.NaN())
	}
}
