package audit

import (
	"math"

	"github.com/dpmf-go/dpmf/privacy"
	"gonum.org/v1/gonum/stat/distuv"
)

// GDPRejects reports whether the game g rejects, at level beta, the
// hypothesis that the mechanism is mu-GDP (Gaussian differential privacy:
// the trade-off curve of a Gaussian mechanism with sensitivity 1 and
// standard deviation 1/mu) with respect to every canary. It is the f-DP
// analysis of one-run auditing with abstentions (Mahloujifar, Melis &
// Chaudhuri 2024), specialized to the Gaussian trade-off curve
// f(x) = Phi(Phi^-1(1-x) - mu): starting from the probability mass the
// hypothesis "c or more correct guesses with probability >= beta" needs,
// it walks down the number of correct guesses, each step growing that mass
// by the inverse of the trade-off curve; if the mass exceeds the fraction
// of canaries guessed, the hypothesis is impossible under mu-GDP.
//
// Its reach is narrower than PValue's: rejecting mu-GDP rejects the
// Gaussian-shaped claim, not (eps, delta)-DP in general. It tests the claim
// of an unamplified matrix mechanism exactly (one Gaussian mechanism with
// noise multiplier sigma is (1/sigma)-GDP); an amplified claim (Poisson
// DP-SGD, band-poisson BandMF) is not Gaussian-shaped.
func GDPRejects(g Guesses, mu, beta float64) (bool, error) {
	if err := g.validate(); err != nil {
		return false, err
	}
	if !(mu >= 0) || math.IsInf(mu, 0) {
		return false, invalidf("mu %v, want finite and >= 0", mu)
	}
	if !(beta > 0 && beta < 1) {
		return false, invalidf("beta (1 - confidence) %v, want (0, 1)", beta)
	}
	return gdpRejects(g, mu, beta), nil
}

func gdpRejects(g Guesses, mu, beta float64) bool {
	c, guesses := g.Correct, g.Guesses
	if c == 0 {
		return false
	}
	limit := float64(guesses) / float64(g.Canaries)
	tau := beta * limit
	r := tau * float64(c) / float64(guesses)
	h := tau * float64(guesses-c) / float64(guesses)
	for i := c - 1; i >= 0; i-- {
		if r+h > limit {
			return true // r and h only grow from here
		}
		hn := math.Max(h, blowDown(r, mu))
		r += float64(i) / float64(guesses-i) * (hn - h)
		h = hn
	}
	return r+h > limit
}

// blowDown is the inverse of the mu-GDP blow-up x -> Phi(Phi^-1(x) + mu).
func blowDown(x, mu float64) float64 {
	if x >= 1 {
		return 1
	}
	return distuv.UnitNormal.CDF(distuv.UnitNormal.Quantile(x) - mu)
}

// GDPLowerBound is the largest mu such that g rejects mu'-GDP at level beta
// for every mu' < mu (0 if it rejects none): at confidence 1 - beta the
// mechanism is not mu'-GDP for any mu' below it. Found by bisection to
// 1e-6.
func GDPLowerBound(g Guesses, beta float64) (float64, error) {
	if _, err := GDPRejects(g, 0, beta); err != nil {
		return 0, err
	}
	return gdpLowerBound(g, beta), nil
}

func gdpLowerBound(g Guesses, beta float64) float64 {
	if !gdpRejects(g, 0, beta) {
		return 0
	}
	lo, hi := 0.0, 1.0
	for gdpRejects(g, hi, beta) {
		lo, hi = hi, 2*hi
		if hi > 1e3 {
			return lo
		}
	}
	for hi-lo > 1e-6 {
		mid := (lo + hi) / 2
		if gdpRejects(g, mid, beta) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// GDPResult is the f-DP (Gaussian) reading of an audit.
type GDPResult struct {
	// MuLowerBound: at the confidence, the run is not mu-GDP for any mu
	// below it.
	MuLowerBound float64 `json:"mu_lower_bound"`
	// EpsilonLowerBound is the epsilon at Delta of the Gaussian mechanism
	// with that mu: a lower bound on epsilon only for a run whose privacy
	// is Gaussian-shaped (see GDPRejects).
	EpsilonLowerBound float64 `json:"epsilon_lower_bound"`
	Delta             float64 `json:"delta"`
	Confidence        float64 `json:"confidence"`
	GuessIn           int     `json:"guess_in"`
	GuessOut          int     `json:"guess_out"`
	Guesses           Guesses `json:"guesses"`
	Thresholds        int     `json:"thresholds"`
	Search            string  `json:"search"`
}

// GDPFromScores is FromScores for the mu-GDP hypothesis: the best mu lower
// bound over the Grid of (k+, k-), with the same Search, converted to the
// epsilon at delta of that Gaussian mechanism.
func GDPFromScores(scores []float64, in []bool, delta, confidence float64, search Search) (GDPResult, error) {
	gs, err := gridGames(scores, in, confidence, delta, search)
	if err != nil {
		return GDPResult{}, err
	}
	res := GDPResult{Delta: delta, Confidence: confidence, Thresholds: len(gs.grid), Search: search.String()}
	for i, g := range gs.games {
		mu := gdpLowerBound(g, gs.beta)
		if i == 0 || mu > res.MuLowerBound {
			res.MuLowerBound, res.GuessIn, res.GuessOut, res.Guesses = mu, gs.grid[i][0], gs.grid[i][1], g
		}
	}
	if res.MuLowerBound > 0 && delta > 0 {
		eps, err := privacy.GaussianEpsilon(1/res.MuLowerBound, delta)
		if err != nil {
			return res, err
		}
		res.EpsilonLowerBound = eps
	}
	return res, nil
}
