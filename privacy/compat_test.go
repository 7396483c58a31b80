package privacy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/sampler"
)

func seed(b byte) sampler.Options {
	var s dpcore.Seed
	for i := range s {
		s[i] = b + byte(i)
	}
	return sampler.Options{Seed: &s}
}

func TestCheckCompatible(t *testing.T) {
	must := func(s sampler.Sampler, err error) sampler.Sampler {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	kb := func(k, b int) dpcore.Schema { return dpcore.Schema{Kind: dpcore.KB, K: k, B: b} }
	ms := func(k, b int) dpcore.Schema { return dpcore.Schema{Kind: dpcore.MinSep, K: k, B: b} }
	single := dpcore.SingleParticipation()
	// m = 1000, B = 10: fixed order b = 100 steps per epoch, n = 400: k = 4.
	fixed := must(sampler.NewFixedOrder(1000, 10, 400, seed(0)))
	fixedOne := must(sampler.NewFixedOrder(1000, 10, 100, seed(0)))
	poisson := must(sampler.NewPoisson(1000, 0.01, 400, seed(0)))
	band := must(sampler.NewBandPoisson(1000, 10, 8, 400, false, seed(0)))
	bandFixed := must(sampler.NewBandPoisson(1000, 10, 8, 400, true, seed(0)))
	minsep := must(sampler.NewMinSep(1000, 10, 4, 50, 400, 0.5, seed(0)))
	shuffle := must(sampler.NewShuffle(1000, 10, 400, seed(0)))

	for _, tc := range []struct {
		name      string
		s         sampler.Sampler
		sc        dpcore.Schema
		bands     int
		amplified bool
		refuse    string // "" accepts; else a substring of the reason
	}{
		{"fixed with its schema", fixed, kb(4, 100), 0, false, ""},
		{"fixed in kb with a divisor b", fixed, kb(8, 50), 0, false, ""},
		{"fixed in minsep", fixed, ms(4, 100), 0, false, ""},
		{"fixed banded within b", fixed, kb(4, 100), 100, false, ""},
		{"fixed amplified", fixed, kb(4, 100), 1, true, "no sampling randomness"},
		{"fixed under single", fixed, single, 0, false, "does not contain"},
		{"fixed under wrong b", fixed, kb(5, 80), 0, false, "does not contain"},
		{"fixed under fewer k", fixed, ms(3, 100), 0, false, "does not contain"},
		{"fixed bands > b", fixed, kb(4, 100), 101, false, "separation"},
		{"one epoch is single", fixedOne, single, 0, false, ""},
		{"poisson DP-SGD amplified", poisson, single, 1, true, ""},
		{"poisson banded amplified", poisson, ms(400, 1), 4, true, "no amplification"},
		{"poisson dense amplified", poisson, ms(400, 1), 0, true, "dense"},
		{"poisson unamplified dense", poisson, kb(400, 1), 0, false, ""},
		{"poisson unamplified under kb(4,100)", poisson, kb(4, 100), 0, false, "does not contain"},
		{"poisson unamplified banded", poisson, ms(400, 1), 4, false, "separation"},
		{"band amplified", band, ms(50, 8), 8, true, ""},
		{"band amplified fewer bands", band, ms(50, 8), 3, true, ""},
		{"band amplified too many bands", band, ms(50, 8), 9, true, "partitions"},
		{"band amplified dense", band, ms(50, 8), 0, true, "dense"},
		{"band unamplified", band, ms(50, 8), 8, false, ""},
		{"band under kb", band, kb(50, 8), 0, false, "does not contain"},
		{"band under looser minsep", band, ms(60, 4), 0, false, ""},
		{"band fixed-size amplified", bandFixed, ms(50, 8), 8, true, "without replacement"},
		{"band fixed-size unamplified", bandFixed, ms(50, 8), 8, false, ""},
		{"minsep amplified", minsep, ms(4, 50), 50, true, "availability"},
		{"minsep", minsep, ms(4, 50), 50, false, ""},
		{"minsep under kb", minsep, kb(4, 100), 0, false, "does not contain"},
		{"minsep too many bands", minsep, ms(4, 50), 51, false, "separation"},
		{"minsep k too small", minsep, ms(3, 50), 0, false, "does not contain"},
		{"shuffle amplified", shuffle, ms(4, 1), 1, true, "shuffling"},
		{"shuffle under kb", shuffle, kb(4, 100), 0, false, "does not contain"},
		{"shuffle honest", shuffle, ms(4, 1), 0, false, ""},
		{"shuffle banded", shuffle, ms(4, 1), 2, false, "separation"},
	} {
		err := CheckCompatible(tc.s, tc.sc, tc.bands, tc.amplified)
		if tc.refuse == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrIncompatible) || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refuse) {
			t.Errorf("%s: err = %v, want ErrIncompatible mentioning %q", tc.name, err, tc.refuse)
		}
	}
	if err := CheckCompatible(fixed, kb(2, 100), 0, false); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("kb(2,100) over 400 steps: err = %v, want dpcore.ErrInvalid", err)
	}
	if err := CheckCompatible(fixed, kb(4, 100), -1, false); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("bands = -1: err = %v, want dpcore.ErrInvalid", err)
	}
	if err := CheckCompatible(nil, kb(4, 100), 0, false); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("nil sampler: err = %v, want dpcore.ErrInvalid", err)
	}
}

// TestContainsAgainstPatterns checks contains on small cases against an
// explicit enumeration: every realizable pattern of s must be a subset of a
// pattern of t.
func TestContainsAgainstPatterns(t *testing.T) {
	const n = 12
	var schemas []dpcore.Schema
	schemas = append(schemas, dpcore.SingleParticipation())
	for k := 1; k <= 4; k++ {
		for b := 1; b <= 6; b++ {
			if k*b >= n {
				schemas = append(schemas, dpcore.Schema{Kind: dpcore.KB, K: k, B: b})
			}
			schemas = append(schemas, dpcore.Schema{Kind: dpcore.MinSep, K: k, B: b})
		}
	}
	pats := func(sc dpcore.Schema) [][]int {
		var out [][]int
		if sc.Kind == dpcore.KB {
			for _, q := range sc.Patterns(n) {
				for mask := 1; mask < 1<<len(q); mask++ {
					var p []int
					for i, x := range q {
						if mask&(1<<i) != 0 {
							p = append(p, x)
						}
					}
					out = append(out, p)
				}
			}
			return out
		}
		var rec func(p []int, from int)
		rec = func(p []int, from int) {
			if len(p) > 0 {
				out = append(out, slices.Clone(p))
			}
			if len(p) == effectiveK(sc, n) {
				return
			}
			for i := from; i < n; i++ {
				if len(p) > 0 && i-p[len(p)-1] < separation(sc) {
					continue
				}
				rec(append(p, i), i+1)
			}
		}
		rec(nil, 0)
		return out
	}
	subset := func(a, b []int) bool {
		for _, x := range a {
			if !slices.Contains(b, x) {
				return false
			}
		}
		return true
	}
	for _, tt := range schemas {
		tp := pats(tt)
		for _, ss := range schemas {
			want := true
			for _, p := range pats(ss) {
				if !slices.ContainsFunc(tp, func(q []int) bool { return subset(p, q) }) {
					want = false
					break
				}
			}
			if got := contains(tt, ss, n); got != want {
				t.Errorf("contains(%v, %v) = %t, enumeration says %t", tt, ss, got, want)
			}
		}
	}
}

func ExampleCheckCompatible() {
	fixed, _ := sampler.NewFixedOrder(50000, 500, 2000, sampler.Options{})
	kb, _ := dpcore.KBParticipation(20, 100)

	// A mechanism optimized for (k=20, b=100) matches fixed-order epochs,
	// accounted unamplified.
	fmt.Println(CheckCompatible(fixed, kb, 0, false))
	// Claiming amplification for fixed-order epochs is refused.
	fmt.Println(CheckCompatible(fixed, kb, 0, true))

	// Reshuffling each epoch breaks (k,b)-participation.
	shuffled, _ := sampler.NewShuffle(50000, 500, 2000, sampler.Options{})
	fmt.Println(CheckCompatible(shuffled, kb, 0, false))

	// Amplified banded MF needs no more bands than partitions.
	band, _ := sampler.NewBandPoisson(50000, 500, 10, 2000, false, sampler.Options{})
	ms, _ := dpcore.MinSepParticipation(200, 10)
	fmt.Println(CheckCompatible(band, ms, 10, true))
	fmt.Println(CheckCompatible(band, ms, 16, true))
	// Output:
	// <nil>
	// privacy: plan refused: incompatible sampler and mechanism: fixed-order epochs(m=50000, B=500, n=2000) supports only unamplified accounting: no sampling randomness: no amplification may be claimed
	// privacy: plan refused: incompatible sampler and mechanism: shuffling(m=50000, B=500, n=2000) realizes minsep(k=20,b=1) over n = 2000 steps, which kb(k=20,b=100) does not contain: the mechanism's sensitivity would not cover this participation
	// <nil>
	// privacy: plan refused: incompatible sampler and mechanism: partitioned band sampling(m=50000, B=500, bands=10, n=2000, fixedSize=false): the encoder has 16 bands but the sampler has 10 partitions; banded-MF Thm 4 needs bands <= partitions
}
