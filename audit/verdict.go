package audit

// Claim is what an audit tests: that the run is (Epsilon, Delta)-DP and,
// when Mu > 0, that it is Mu-GDP (the claim of an unamplified matrix
// mechanism, one Gaussian mechanism with noise multiplier 1/Mu).
type Claim struct {
	Epsilon, Delta float64
	Mu             float64
}

// Verdict is an audit's one conclusion about a Claim at a stated
// confidence.
type Verdict struct {
	// Bound is the epsilon lower bound and GDP, for a claim with Mu > 0,
	// the mu lower bound; each is computed at the level Tests divides the
	// error probability into (its Confidence field says which).
	Bound Result
	GDP   *GDPResult
	// Tests is the number of readings, 1 or 2; Confidence the verdict's.
	Tests      int
	Confidence float64
	// Violated is the one flag: at Confidence, the claim does not hold.
	// EpsilonViolated and GDPViolated say which reading found it.
	Violated        bool
	EpsilonViolated bool
	GDPViolated     bool
}

// Check tests claim c against the canary scores at the stated confidence
// with one flag: each of the Tests readings (the epsilon bound,
// FromScores; and for a Gaussian claim the mu bound, GDPFromScores) is
// made at level (1 - confidence)/Tests, so that by the union bound the
// probability that a run satisfying the claim is flagged is at most
// 1 - confidence. Two readings each at the stated confidence would flag
// it with probability up to twice that.
func Check(scores []float64, in []bool, c Claim, confidence float64, search Search) (Verdict, error) {
	if !(confidence > 0 && confidence < 1) {
		return Verdict{}, invalidf("confidence %v, want (0, 1)", confidence)
	}
	v := Verdict{Tests: 1, Confidence: confidence}
	if c.Mu > 0 {
		v.Tests = 2
	}
	each := 1 - (1-confidence)/float64(v.Tests)
	var err error
	if v.Bound, err = FromScores(scores, in, c.Delta, each, search); err != nil {
		return Verdict{}, err
	}
	v.EpsilonViolated = v.Bound.EpsilonLowerBound > c.Epsilon
	if c.Mu > 0 {
		gdp, err := GDPFromScores(scores, in, c.Delta, each, search)
		if err != nil {
			return Verdict{}, err
		}
		v.GDP = &gdp
		v.GDPViolated = gdp.MuLowerBound > c.Mu
	}
	v.Violated = v.EpsilonViolated || v.GDPViolated
	return v, nil
}
