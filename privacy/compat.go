package privacy

import (
	"fmt"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/sampler"
)

// CheckCompatible refuses a mechanism or accounting that sampler s does not
// support; the error wraps ErrIncompatible (or dpcore.ErrInvalid for bad arguments)
// and says why. The planner calls it before the first step.
//
// mechanismSchema is the schema the mechanism's sensitivity was computed for
// (and its factorization optimized for). bands is the number of bands of the
// encoder when the privacy claim relies on banding: 1 for DP-SGD (C = I), b
// for a b-banded encoder whose sensitivity comes from banded-MF Thm 2 or
// whose amplification comes from Thm 4; 0 for a mechanism whose sensitivity
// was computed for mechanismSchema without relying on its band structure.
// amplified says the accountant will claim amplification by sampling.
//
// Unamplified, the sampler's schema must be contained in mechanismSchema
// (every pattern the sampler can realize is covered by one the sensitivity
// accounted for), and a banded encoder needs participations at least bands
// steps apart. Amplified, the sampler must support it (Poisson, partitioned
// band sampling or random allocation, never fixed-order epochs, shuffling or
// min-sep simulation), plain Poisson sampling only for DP-SGD (bands = 1),
// and band sampling and random allocation only for an encoder with at most
// as many bands as partitions (1 for random allocation over all examples). Schema
// containment is not needed then: amplified accounting uses the per-step
// sensitivity (the largest column norm), which every schema's sensitivity
// bounds from above.
func CheckCompatible(s sampler.Sampler, mechanismSchema dpcore.Schema, bands int, amplified bool) error {
	if s == nil {
		return invalidf("compatible: nil sampler")
	}
	n := s.Steps()
	if err := mechanismSchema.Validate(n); err != nil {
		return fmt.Errorf("privacy: compatible: mechanism schema: %w", err)
	}
	if bands < 0 {
		return invalidf("compatible: bands = %d must be >= 0", bands)
	}
	acc := s.Accounting()
	ss := s.Schema()
	name := describe(s)
	if amplified {
		switch acc.Kind {
		case sampler.AccountingUnamplified:
			return incompatiblef("%s supports only unamplified accounting: %s", name, noAmplificationReason(acc))
		case sampler.AccountingNone:
			return incompatiblef("%s: the papers' amplified accounting assumes Poisson sampling and does not apply to shuffling; account unamplified", name)
		case sampler.AccountingPoisson:
			if bands != 1 {
				return incompatiblef("%s amplifies only DP-SGD (a 1-banded encoder); a mechanism with %s gets no amplification from unpartitioned Poisson sampling: use NewBandPoisson with at least that many bands, or unamplified accounting", name, bandsText(bands))
			}
		case sampler.AccountingRandomAllocation:
			if bands == 0 || bands > acc.Bands {
				return incompatiblef("%s: random allocation over %d partition(s) is accounted for encoders with at most %d bands (docs/math.md, section 7.1), not a mechanism with %s", name, acc.Bands, acc.Bands, bandsText(bands))
			}
		case sampler.AccountingBandPoisson:
			if bands == 0 {
				return incompatiblef("%s: amplified BandMF (banded-MF Thm 4) needs a banded encoder, got a dense one (bands = 0)", name)
			}
			if bands > acc.Bands {
				return incompatiblef("%s: the encoder has %d bands but the sampler has %d partitions; banded-MF Thm 4 needs bands <= partitions", name, bands, acc.Bands)
			}
		default:
			return incompatiblef("%s: unknown accounting kind %q", name, acc.Kind)
		}
		return nil
	}
	switch acc.Kind {
	case sampler.AccountingUnamplified, sampler.AccountingNone, sampler.AccountingPoisson, sampler.AccountingBandPoisson, sampler.AccountingRandomAllocation:
	default:
		return incompatiblef("%s: unknown accounting kind %q", name, acc.Kind)
	}
	if bands > 0 && effectiveK(ss, n) > 1 && bands > separation(ss) {
		return incompatiblef("%s realizes %v: participations can be %d step(s) apart, fewer than the encoder's %d bands (banded-MF Thm 2 needs separation >= bands)", name, ss, separation(ss), bands)
	}
	if !contains(mechanismSchema, ss, n) {
		return incompatiblef("%s realizes %v over n = %d steps, which %v does not contain: the mechanism's sensitivity would not cover this participation", name, ss, n, mechanismSchema)
	}
	return nil
}

func incompatiblef(format string, args ...any) error {
	return refuse(RuleCompatible, format, args...)
}

// describe names a sampler by its kind and parameters.
func describe(s sampler.Sampler) string {
	if st, ok := s.(fmt.Stringer); ok {
		return st.String()
	}
	return fmt.Sprintf("sampler %T", s)
}

// noAmplificationReason is the sampler's own statement of why it cannot
// amplify, among its accounting assumptions.
func noAmplificationReason(acc sampler.Accounting) string {
	for _, a := range acc.Assumptions {
		if strings.Contains(a, "no amplification") {
			return a
		}
	}
	return "it reports no amplification"
}

func bandsText(bands int) string {
	if bands == 0 {
		return "a dense encoder (bands = 0)"
	}
	return fmt.Sprintf("%d bands", bands)
}

// effectiveK is the most participations schema sc allows in n steps.
func effectiveK(sc dpcore.Schema, n int) int {
	if sc.Kind == dpcore.Single {
		return 1
	}
	return min(sc.K, (n+sc.B-1)/sc.B)
}

// separation is the fewest steps between two participations sc allows.
func separation(sc dpcore.Schema) int {
	if sc.Kind == dpcore.Single {
		return 1
	}
	return sc.B
}

// contains reports whether every pattern of s (restricted to n steps) is a
// subset of a pattern of t; t is valid for n. Sensitivity is a supremum over
// patterns and subsets of a pattern (an example whose gradient is zero on
// some steps), so containment is what makes t's sensitivity cover s.
func contains(t, s dpcore.Schema, n int) bool {
	ks := effectiveK(s, n)
	if ks <= 1 {
		// Singletons are in every valid schema (kb needs k*b >= n).
		return true
	}
	switch t.Kind {
	case dpcore.KB:
		// s's patterns must stay in one residue class mod t.B; t.K*t.B >= n
		// makes t's pattern cover the whole class.
		return s.Kind == dpcore.KB && s.B%t.B == 0
	case dpcore.MinSep:
		// kb patterns are min-sep patterns with separation s.B.
		return s.B >= t.B && ks <= t.K
	}
	return false
}
