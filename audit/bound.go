package audit

import (
	"fmt"
	"math"
	"sort"
)

// Guesses summarizes one audit game (Steinke, Nasr & Jagielski 2023,
// Sec. 3): Canaries were each included independently with probability 1/2,
// the adversary guessed the membership of Guesses of them (abstaining on the
// rest) and Correct of its guesses were right.
type Guesses struct {
	Canaries int `json:"canaries"`
	Guesses  int `json:"guesses"`
	Correct  int `json:"correct"`
}

func (g Guesses) validate() error {
	if g.Canaries <= 0 || g.Guesses < 0 || g.Correct < 0 || g.Correct > g.Guesses || g.Guesses > g.Canaries {
		return invalidf("guesses: want 0 <= correct (%d) <= guesses (%d) <= canaries (%d), canaries > 0", g.Correct, g.Guesses, g.Canaries)
	}
	return nil
}

// PValue is the probability, under the hypothesis that the mechanism is
// (eps, delta)-DP with respect to every canary, of at least g.Correct
// correct guesses out of g.Guesses (Steinke et al. 2023, Thm. 3.1 with the
// computation of their App. D):
//
//	p = P[W >= v] + 2 m delta max_{i=1..v} P[v-i <= W < v] / i,
//	W ~ Binomial(r, e^eps/(1+e^eps)),
//
// r = g.Guesses, v = g.Correct, m = g.Canaries. Every binomial probability is
// a sum of exact terms computed in log space (no normal approximation). The
// result is capped at 1.
func PValue(g Guesses, eps, delta float64) (float64, error) {
	if err := g.validate(); err != nil {
		return 0, err
	}
	if !(eps >= 0) || math.IsInf(eps, 0) {
		return 0, invalidf("epsilon %v, want finite and >= 0", eps)
	}
	if !(delta >= 0 && delta < 1) {
		return 0, invalidf("delta %v, want [0, 1)", delta)
	}
	return pValue(g, eps, delta, make([]float64, g.Guesses+1)), nil
}

// pValue is PValue without checks; pmf is scratch of length r+1.
func pValue(g Guesses, eps, delta float64, pmf []float64) float64 {
	r, v := g.Guesses, g.Correct
	if v == 0 {
		return 1
	}
	// log q and log(1-q) for q = e^eps/(1+e^eps), stable for large eps.
	lq := -math.Log1p(math.Exp(-eps))
	l1q := -eps + lq
	lgr, _ := math.Lgamma(float64(r + 1))
	for k := 0; k <= r; k++ {
		a, _ := math.Lgamma(float64(k + 1))
		b, _ := math.Lgamma(float64(r - k + 1))
		pmf[k] = math.Exp(lgr - a - b + float64(k)*lq + float64(r-k)*l1q)
	}
	// Upper tail summed from the small end for accuracy.
	var tail float64
	for k := r; k >= v; k-- {
		tail += pmf[k]
	}
	p := tail
	if delta > 0 {
		var sum, alpha float64
		for i := 1; i <= v; i++ {
			sum += pmf[v-i]
			alpha = math.Max(alpha, sum/float64(i))
		}
		p += 2 * float64(g.Canaries) * delta * alpha
	}
	return math.Min(p, 1)
}

// EpsilonLowerBound is the largest eps such that the hypothesis "the
// mechanism is (eps, delta)-DP" is rejected at level beta by g: the audit's
// lower bound on epsilon at confidence 1 - beta. It is 0 when even eps = 0
// cannot be rejected. The p-value grows with eps, so the bound is found by
// bisection to 1e-6 absolute.
func EpsilonLowerBound(g Guesses, delta, beta float64) (float64, error) {
	if err := g.validate(); err != nil {
		return 0, err
	}
	if !(delta >= 0 && delta < 1) {
		return 0, invalidf("delta %v, want [0, 1)", delta)
	}
	if !(beta > 0 && beta < 1) {
		return 0, invalidf("beta (1 - confidence) %v, want (0, 1)", beta)
	}
	return epsLowerBound(g, delta, beta, make([]float64, g.Guesses+1)), nil
}

func epsLowerBound(g Guesses, delta, beta float64, pmf []float64) float64 {
	if pValue(g, 0, delta, pmf) >= beta {
		return 0
	}
	lo, hi := 0.0, 1.0
	for pValue(g, hi, delta, pmf) < beta {
		lo, hi = hi, 2*hi
		if hi > 1e4 {
			return lo // no finite bound: every eps tested is rejected
		}
	}
	for hi-lo > 1e-6 {
		mid := (lo + hi) / 2
		if pValue(g, mid, delta, pmf) < beta {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Search says how the numbers of IN and OUT guesses (k+, k-) are chosen from
// the scores.
type Search int

const (
	// Bonferroni tries a fixed grid of (k+, k-) and tests each at level
	// beta / (grid size), so the reported bound holds at the stated
	// confidence whichever threshold wins. The default.
	Bonferroni Search = iota
	// Uncorrected tries the same grid at level beta each and reports the
	// best, as Steinke et al. do in their experiments. The stated
	// confidence is then nominal: choosing the best of K thresholds after
	// seeing the data is a multiple test, and the true confidence can be as
	// low as 1 - K beta. Use it to compare with published numbers, not to
	// accuse a system.
	Uncorrected
)

func (s Search) String() string {
	switch s {
	case Bonferroni:
		return "bonferroni"
	case Uncorrected:
		return "uncorrected"
	}
	return fmt.Sprintf("Search(%d)", int(s))
}

// Result is an audit's conclusion.
type Result struct {
	// EpsilonLowerBound: at confidence Confidence, the run is not
	// (eps, Delta)-DP for any eps below it.
	EpsilonLowerBound float64 `json:"epsilon_lower_bound"`
	Delta             float64 `json:"delta"`
	Confidence        float64 `json:"confidence"`
	// GuessIn and GuessOut are the chosen k+ (top scores guessed IN) and
	// k- (bottom scores guessed OUT); Guesses the resulting game.
	GuessIn  int     `json:"guess_in"`
	GuessOut int     `json:"guess_out"`
	Guesses  Guesses `json:"guesses"`
	// Thresholds is the number of (k+, k-) pairs tried and Search how the
	// confidence accounts for them.
	Thresholds int    `json:"thresholds"`
	Search     string `json:"search"`
	// Included is the number of canaries that were IN.
	Included int `json:"included"`
}

// Grid returns the (k+, k-) pairs tried for m canaries: k+ in m/64, m/32,
// ..., m/2 (rounded, at least 1, deduplicated) with k- = 0 (guess only IN:
// the strongest choice when OUT scores are not separable from the unsampled
// IN ones, as under Poisson sampling) or k- = k+.
func Grid(m int) [][2]int {
	var ks []int
	for div := 64; div >= 2; div /= 2 {
		k := max(1, int(math.Round(float64(m)/float64(div))))
		if len(ks) == 0 || ks[len(ks)-1] != k {
			ks = append(ks, k)
		}
	}
	var out [][2]int
	for _, k := range ks {
		out = append(out, [2]int{k, 0})
		if 2*k <= m {
			out = append(out, [2]int{k, k})
		}
	}
	return out
}

// FromScores turns canary scores (higher: more likely IN) and the true
// membership into the best lower bound over the Grid of (k+, k-): the k+
// highest scores are guessed IN, the k- lowest OUT, the rest abstain. Ties
// are broken by canary index, which does not depend on membership.
func FromScores(scores []float64, in []bool, delta, confidence float64, search Search) (Result, error) {
	gs, err := gridGames(scores, in, confidence, delta, search)
	if err != nil {
		return Result{}, err
	}
	res := Result{Delta: delta, Confidence: confidence, Thresholds: len(gs.grid), Search: search.String(), Included: gs.included}
	pmf := make([]float64, len(scores)+1)
	for i, g := range gs.games {
		eps := epsLowerBound(g, delta, gs.beta, pmf[:g.Guesses+1])
		if i == 0 || eps > res.EpsilonLowerBound {
			res.EpsilonLowerBound, res.GuessIn, res.GuessOut, res.Guesses = eps, gs.grid[i][0], gs.grid[i][1], g
		}
	}
	return res, nil
}

// games are the guessing games of the Grid on one set of scores, and the
// level each is tested at.
type games struct {
	grid     [][2]int
	games    []Guesses
	beta     float64
	included int
}

func gridGames(scores []float64, in []bool, confidence, delta float64, search Search) (games, error) {
	m := len(scores)
	if m == 0 || len(in) != m {
		return games{}, invalidf("%d scores and %d memberships: want the same positive number", m, len(in))
	}
	if !(confidence > 0 && confidence < 1) {
		return games{}, invalidf("confidence %v, want (0, 1)", confidence)
	}
	if !(delta >= 0 && delta < 1) {
		return games{}, invalidf("delta %v, want [0, 1)", delta)
	}
	if search != Bonferroni && search != Uncorrected {
		return games{}, invalidf("search %v", search)
	}
	for i, s := range scores {
		if math.IsNaN(s) {
			return games{}, invalidf("score of canary %d is NaN", i)
		}
	}
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return scores[order[a]] > scores[order[b]] })
	// top[k]: IN canaries among the k highest; bottom[k]: OUT among the k
	// lowest.
	top, bottom := make([]int, m+1), make([]int, m+1)
	gs := games{grid: Grid(m), beta: 1 - confidence}
	for k := 1; k <= m; k++ {
		top[k] = top[k-1]
		if in[order[k-1]] {
			top[k]++
			gs.included++
		}
		bottom[k] = bottom[k-1]
		if !in[order[m-k]] {
			bottom[k]++
		}
	}
	if search == Bonferroni {
		gs.beta /= float64(len(gs.grid))
	}
	for _, kk := range gs.grid {
		gs.games = append(gs.games, Guesses{Canaries: m, Guesses: kk[0] + kk[1], Correct: top[kk[0]] + bottom[kk[1]]})
	}
	return gs, nil
}
