package audit

import (
	"math/rand/v2"
	"testing"
)

// Check makes one flag at the stated confidence: a claim with one reading
// is FromScores at that confidence; with a Gaussian claim both readings
// are made at half the error probability, and the flag is their union.
func TestCheckOneFlag(t *testing.T) {
	const m, delta, conf = 1000, 1e-5, 0.95
	r := rand.New(rand.NewPCG(1, 2))
	scores, in := make([]float64, m), make([]bool, m)
	for i := range scores {
		in[i] = r.Uint64()&1 == 1
		scores[i] = r.NormFloat64()
		if in[i] {
			scores[i] += 3
		}
	}
	one, err := Check(scores, in, Claim{Epsilon: 1, Delta: delta}, conf, Bonferroni)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := FromScores(scores, in, delta, conf, Bonferroni)
	if err != nil {
		t.Fatal(err)
	}
	if one.Tests != 1 || one.GDP != nil || one.Bound != ref || one.Violated != (ref.EpsilonLowerBound > 1) || !one.Violated {
		t.Fatalf("epsilon claim alone: %+v, want the reading %+v at %v", one, ref, conf)
	}
	half := 1 - (1-conf)/2
	refEps, _ := FromScores(scores, in, delta, half, Bonferroni)
	refGDP, _ := GDPFromScores(scores, in, delta, half, Bonferroni)
	for _, c := range []Claim{
		{Epsilon: 100, Delta: delta, Mu: refGDP.MuLowerBound * 1.01},
		{Epsilon: 100, Delta: delta, Mu: refGDP.MuLowerBound * 0.99},
		{Epsilon: refEps.EpsilonLowerBound * 0.99, Delta: delta, Mu: 100},
	} {
		v, err := Check(scores, in, c, conf, Bonferroni)
		if err != nil {
			t.Fatal(err)
		}
		wantEps, wantGDP := refEps.EpsilonLowerBound > c.Epsilon, refGDP.MuLowerBound > c.Mu
		if v.Tests != 2 || v.Bound != refEps || v.GDP == nil || *v.GDP != refGDP ||
			v.EpsilonViolated != wantEps || v.GDPViolated != wantGDP || v.Violated != (wantEps || wantGDP) {
			t.Errorf("claim %+v: verdict %+v, want readings at %v (epsilon %v, mu %v)", c, v, half, refEps.EpsilonLowerBound, refGDP.MuLowerBound)
		}
	}
	if _, err := Check(scores, in, Claim{Epsilon: 1, Delta: delta}, 1, Bonferroni); err == nil {
		t.Error("confidence 1 accepted")
	}
}
