package audit

import (
	"math"
	mrand "math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"
)

// idealGame draws m canaries of an exactly mu-GDP mechanism observed
// directly: an IN canary's score is N(mu, 1), an OUT canary's N(0, 1).
func idealGame(m int, mu float64, seed uint64) ([]float64, []bool) {
	rng := mrand.New(mrand.NewPCG(seed, 5))
	scores, in := make([]float64, m), make([]bool, m)
	for j := range scores {
		in[j] = rng.IntN(2) == 1
		scores[j] = rng.NormFloat64()
		if in[j] {
			scores[j] += mu
		}
	}
	return scores, in
}

// Validity: on a mechanism that is exactly mu-GDP the f-DP audit must
// reject the true mu in at most a beta fraction of games. 100 seeded games
// at 95% (Bonferroni): the expected number of false rejections is at most
// 5; we allow 12 (about the 99.5% quantile of Bin(100, 0.05)), and find
// none because Bonferroni is conservative.
func TestGDPAuditRejectsTheTrueMuRarely(t *testing.T) {
	for _, eps := range []float64{1, 4, 8} {
		sigma, err := privacy.GaussianSigma(eps, 1e-5)
		if err != nil {
			t.Fatal(err)
		}
		mu := 1 / sigma
		const games = 100
		wrong, sumMu := 0, 0.0
		for s := range games {
			scores, in := idealGame(1000, mu, uint64(s))
			res, err := GDPFromScores(scores, in, 1e-5, 0.95, Bonferroni)
			if err != nil {
				t.Fatal(err)
			}
			if res.MuLowerBound > mu {
				wrong++
			}
			sumMu += res.MuLowerBound
		}
		t.Logf("eps %g (mu %.3f): %d of %d games reject the true mu; mean mu bound %.3f", eps, mu, wrong, games, sumMu/games)
		if wrong > 12 {
			t.Errorf("eps %g: the true mu = %.3f rejected in %d of %d games (level 5%%)", eps, mu, wrong, games)
		}
		// Power: a mechanism with a quarter of the noise (4 mu) is caught,
		// where 1000 canaries can reach that far: even 1000 correct guesses
		// of 1000 reject only mu < 1.80 at 0.05/12, and the grid's
		// all-correct games (k+ = k- = 250 when about 500 are IN) reach
		// less than eps 8's mu = 1.67.
		if eps == 8 {
			continue
		}
		caught := 0
		for s := range 20 {
			scores, in := idealGame(1000, 4*mu, uint64(1000+s))
			res, err := GDPFromScores(scores, in, 1e-5, 0.95, Bonferroni)
			if err != nil {
				t.Fatal(err)
			}
			if res.MuLowerBound > mu {
				caught++
			}
		}
		if caught < 18 {
			t.Errorf("eps %g: noise x0.25 caught in %d of 20 games, want at least 18", eps, caught)
		}
	}
}

// On Gaussian noise the f-DP reading is much tighter than the (eps, delta)
// bound of Steinke et al. on the same scores, and it grows with mu.
func TestGDPAuditIsTighterOnGaussianNoise(t *testing.T) {
	prev := 0.0
	for _, eps := range []float64{2, 4, 8} {
		sigma, _ := privacy.GaussianSigma(eps, 1e-5)
		var gdp, sj float64
		for s := range 10 {
			scores, in := idealGame(1000, 1/sigma, uint64(100+s))
			g, err := GDPFromScores(scores, in, 1e-5, 0.95, Bonferroni)
			if err != nil {
				t.Fatal(err)
			}
			r, err := FromScores(scores, in, 1e-5, 0.95, Bonferroni)
			if err != nil {
				t.Fatal(err)
			}
			gdp += g.EpsilonLowerBound / 10
			sj += r.EpsilonLowerBound / 10
		}
		t.Logf("eps %g: mean f-DP (Gaussian) bound %.3f, (eps, delta) bound %.3f", eps, gdp, sj)
		if !(gdp > sj) || !(gdp > prev) || gdp > eps {
			t.Errorf("eps %g: f-DP bound %.3f, (eps, delta) bound %.3f, previous %.3f: want sj < f-DP <= eps and growing", eps, gdp, sj, prev)
		}
		prev = gdp
	}
}

func TestGDPRejectsBadInput(t *testing.T) {
	g := Guesses{Canaries: 10, Guesses: 5, Correct: 5}
	if _, err := GDPRejects(g, math.NaN(), 0.05); err == nil {
		t.Error("mu NaN: no error")
	}
	if _, err := GDPRejects(g, 1, 0); err == nil {
		t.Error("beta 0: no error")
	}
	if _, err := GDPLowerBound(Guesses{Canaries: 10, Guesses: 5, Correct: 6}, 0.05); err == nil {
		t.Error("6 correct of 5: no error")
	}
}
