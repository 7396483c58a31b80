package privacy

import (
	"context"
	"testing"
)

// CheckRequest refuses what NewPlan refuses before building a
// factorization, with NewPlan's own error, and accepts what NewPlan
// plans (issue 39 item 11: a distributed run checks with it before it
// starts its workers).
func TestCheckRequestAgreesWithNewPlan(t *testing.T) {
	base := Request{Examples: 1000, Batch: 100, Steps: 16, ClipNorm: 1, Epsilon: 4, Accountant: RDP}
	for _, tc := range []struct {
		mech     string
		sampling Sampling
		refused  bool
	}{
		{"bandmf:5000", SamplingAuto, true},    // more bands than steps
		{"bandmf:auto", SamplingPoisson, true}, // auto bands need band-poisson for amplification
		{"bandmf:4", SamplingPoisson, true},    // a 4-banded encoder under plain poisson sampling
		{"mf-kb", SamplingShuffle, true},       // (k,b) schema without fixed-order sampling
		{"bandmf:4", SamplingAuto, false},
		{"bandmf:auto", SamplingFixedOrder, false},
		{"dpsgd", SamplingAuto, false},
	} {
		mech, err := ParseMechanism(tc.mech)
		if err != nil {
			t.Fatalf("%s: %v", tc.mech, err)
		}
		r := base
		r.Mechanism, r.Sampling = mech, tc.sampling
		checked := CheckRequest(r)
		_, _, planned := NewPlan(context.Background(), r)
		if (checked != nil) != tc.refused {
			t.Errorf("%s %s: CheckRequest %v, want refused %v", tc.mech, tc.sampling, checked, tc.refused)
		}
		if checked != nil && (planned == nil || planned.Error() != checked.Error()) {
			t.Errorf("%s %s: CheckRequest %q, NewPlan %v: want NewPlan's own error", tc.mech, tc.sampling, checked, planned)
		}
		if !tc.refused && planned != nil {
			t.Errorf("%s %s: NewPlan refused a request CheckRequest accepts: %v", tc.mech, tc.sampling, planned)
		}
	}
}
