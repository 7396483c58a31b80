package audit

import (
	"errors"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// exactPMF is P[Binomial(r, 3/4) = k] as an exact rational.
func exactPMF(r, k int) *big.Rat {
	c := new(big.Int).Binomial(int64(r), int64(k))
	num := new(big.Int).Mul(c, new(big.Int).Exp(big.NewInt(3), big.NewInt(int64(k)), nil))
	den := new(big.Int).Exp(big.NewInt(4), big.NewInt(int64(r)), nil)
	return new(big.Rat).SetFrac(num, den)
}

// At eps = ln 3 the guess accuracy e^eps/(1+e^eps) is exactly 3/4, so the
// p-value can be computed in exact rationals straight from its definition
// (Steinke et al. Thm. 3.1) and compared with the log-space computation.
func TestPValueMatchesExactRationalArithmetic(t *testing.T) {
	for _, c := range []struct {
		g     Guesses
		delta float64
	}{
		{Guesses{Canaries: 100, Guesses: 60, Correct: 50}, 0},
		{Guesses{Canaries: 100, Guesses: 60, Correct: 50}, 1e-3},
		{Guesses{Canaries: 1000, Guesses: 400, Correct: 330}, 1e-5},
		{Guesses{Canaries: 10, Guesses: 10, Correct: 3}, 1e-2},
	} {
		r, v := c.g.Guesses, c.g.Correct
		tail := new(big.Rat)
		for k := v; k <= r; k++ {
			tail.Add(tail, exactPMF(r, k))
		}
		want, _ := tail.Float64()
		if c.delta > 0 {
			alpha, sum := 0.0, new(big.Rat)
			for i := 1; i <= v; i++ {
				sum.Add(sum, exactPMF(r, v-i))
				f, _ := sum.Float64()
				alpha = math.Max(alpha, f/float64(i))
			}
			want += 2 * float64(c.g.Canaries) * c.delta * alpha
		}
		want = math.Min(want, 1)
		got, err := PValue(c.g, math.Log(3), c.delta)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-want) > 1e-12*want+1e-300 {
			t.Errorf("%+v delta %g: p = %.17g, exact %.17g", c.g, c.delta, got, want)
		}
	}
}

// With delta = 0 and all r guesses correct the p-value is q^r, so the
// bound is logit(beta^(1/r)) in closed form; it grows with r.
func TestAllCorrectGuessesClosedFormAndGrowth(t *testing.T) {
	const beta = 0.05
	prev := 0.0
	for _, r := range []int{1, 5, 10, 100, 1000, 10000} {
		got, err := EpsilonLowerBound(Guesses{Canaries: r, Guesses: r, Correct: r}, 0, beta)
		if err != nil {
			t.Fatal(err)
		}
		q := math.Pow(beta, 1/float64(r))
		want := math.Log(q / (1 - q))
		if r == 1 {
			want = 0 // one correct guess cannot reject eps = 0 at 5% (p = 1/2)
		}
		if math.Abs(got-want) > 1e-5 {
			t.Errorf("r = %d: bound %.6f, closed form %.6f", r, got, want)
		}
		if r > 1 && !(got > prev) {
			t.Errorf("r = %d: bound %.4f does not grow (previous %.4f)", r, got, prev)
		}
		prev = got
	}
	// r = 100 correct out of 100 at 95%: logit(0.05^0.01) = 3.4936.
	got, _ := EpsilonLowerBound(Guesses{Canaries: 100, Guesses: 100, Correct: 100}, 0, beta)
	if math.Abs(got-3.4936) > 1e-3 {
		t.Errorf("100/100: %.4f, want 3.4936", got)
	}
	// delta > 0 can only weaken the bound.
	withDelta, _ := EpsilonLowerBound(Guesses{Canaries: 1000, Guesses: 100, Correct: 100}, 1e-5, beta)
	if !(withDelta < got) {
		t.Errorf("delta 1e-5 bound %.4f, delta 0 %.4f: want smaller", withDelta, got)
	}
}

// Scores that carry no information about membership give a bound of about
// zero: with 95% confidence (Bonferroni over the grid) at most a few of 40
// seeded games exceed 0, and none by much.
func TestRandomGuessesGiveAboutZero(t *testing.T) {
	const m, games = 1000, 40
	positive, worst := 0, 0.0
	for s := range games {
		rng := mrand.New(mrand.NewPCG(uint64(s), 11))
		scores, in := make([]float64, m), make([]bool, m)
		for i := range scores {
			scores[i] = rng.NormFloat64()
			in[i] = rng.IntN(2) == 1
		}
		res, err := FromScores(scores, in, 1e-5, 0.95, Bonferroni)
		if err != nil {
			t.Fatal(err)
		}
		if res.EpsilonLowerBound > 0 {
			positive++
		}
		worst = math.Max(worst, res.EpsilonLowerBound)
	}
	t.Logf("%d of %d games positive, largest bound %.3f", positive, games, worst)
	if positive > 4 || worst > 0.3 {
		t.Errorf("%d of %d uninformative games gave a positive bound (largest %.3f): want at most 4, below 0.3", positive, games, worst)
	}
}

// Perfectly separating scores with m/2 IN: the best threshold guesses
// k+ = k- = m/2, all correct,, tested at beta / (grid size).
func TestPerfectScoresUseTheLargestThreshold(t *testing.T) {
	const m = 1000
	rng := mrand.New(mrand.NewPCG(3, 3))
	scores, in := make([]float64, m), make([]bool, m)
	for i, j := range rng.Perm(m) {
		if in[i] = j < m/2; in[i] { // exactly m/2 IN
			scores[i] = 1 + rng.Float64()
		} else {
			scores[i] = -1 - rng.Float64()
		}
	}
	for _, search := range []Search{Bonferroni, Uncorrected} {
		res, err := FromScores(scores, in, 0, 0.95, search)
		if err != nil {
			t.Fatal(err)
		}
		beta := 0.05
		if search == Bonferroni {
			beta /= float64(len(Grid(m)))
		}
		const k = m / 2
		q := math.Pow(beta, 1/float64(2*k))
		if want := math.Log(q / (1 - q)); math.Abs(res.EpsilonLowerBound-want) > 1e-5 || res.Guesses.Correct != res.Guesses.Guesses {
			t.Errorf("%v: bound %.5f with %+v, want %.5f from %d/%d correct", search, res.EpsilonLowerBound, res.Guesses, want, 2*k, 2*k)
		}
	}
}

func TestBoundRejectsBadInput(t *testing.T) {
	bad := []func() error{
		func() error { _, err := PValue(Guesses{Canaries: 10, Guesses: 5, Correct: 6}, 1, 0); return err },
		func() error { _, err := PValue(Guesses{Canaries: 10, Guesses: 11, Correct: 6}, 1, 0); return err },
		func() error {
			_, err := PValue(Guesses{Canaries: 10, Guesses: 5, Correct: 5}, math.NaN(), 0)
			return err
		},
		func() error {
			_, err := EpsilonLowerBound(Guesses{Canaries: 10, Guesses: 5, Correct: 5}, 0, 1)
			return err
		},
		func() error {
			_, err := EpsilonLowerBound(Guesses{Canaries: 10, Guesses: 5, Correct: 5}, 1, 0.05)
			return err
		},
		func() error { _, err := FromScores([]float64{1, 2}, []bool{true}, 0, 0.95, Bonferroni); return err },
		func() error {
			_, err := FromScores([]float64{1, math.NaN()}, []bool{true, false}, 0, 0.95, Bonferroni)
			return err
		},
		func() error {
			_, err := FromScores([]float64{1, 2}, []bool{true, false}, 0, 1.5, Bonferroni)
			return err
		},
		func() error { _, err := FromScores(nil, nil, 0, 0.95, Bonferroni); return err },
	}
	for i, f := range bad {
		if err := f(); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("case %d: %v, want dpcore.ErrInvalid", i, err)
		}
	}
}
