package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// A flag the chosen mechanism does not read is an error, never silently
// ignored: "gaussian" is one Gaussian mechanism, so -steps and -q would
// change nothing and suggest otherwise (#17 item 8).
func TestAccountRefusesFlagsTheMechanismIgnores(t *testing.T) {
	for _, args := range [][]string{
		{"account", "-mechanism", "gaussian", "-sigma", "1", "-steps", "100"},
		{"account", "-mechanism", "gaussian", "-sigma", "1", "-q", "0.01"},
		{"account", "-mechanism", "gaussian", "-sigma", "1", "-examples", "1000", "-batch", "10"},
		{"account", "-mechanism", "dpsgd", "-sigma", "1", "-q", "0.01", "-bands", "4"},
		{"account", "-mechanism", "bandmf", "-sigma", "1", "-q", "0.01", "-examples", "1000", "-batch", "10", "-bands", "4"},
	} {
		code, out, stderr := runCLI(t, args...)
		if code == 0 {
			t.Errorf("%v: exit 0, %s", args, out)
			continue
		}
		if strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 || !strings.Contains(stderr, "does not use") {
			t.Errorf("%v: stderr %q", args, stderr)
		}
	}
}

// The JSON of "train account" always has the keys q and bands, null where
// the mechanism has none (#17 item 9).
func TestAccountJSONHasQAndBandsAlways(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		q, bands     any
		compositions float64
	}{
		{[]string{"-mechanism", "gaussian", "-sigma", "1"}, nil, nil, 1},
		{[]string{"-mechanism", "dpsgd", "-sigma", "1", "-q", "0.01", "-steps", "10"}, 0.01, nil, 10},
		{[]string{"-mechanism", "bandmf", "-sigma", "1", "-examples", "1000", "-batch", "10", "-bands", "4", "-steps", "10"}, 10.0 / 250, 4.0, 3},
	} {
		code, out, stderr := runCLI(t, append([]string{"account", "-accountant", "rdp"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v: %s", tc.args, stderr)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		q, hasQ := res["q"]
		b, hasB := res["bands"]
		if !hasQ || !hasB || q != tc.q || b != tc.bands || res["compositions"] != tc.compositions {
			t.Errorf("%v: %s: want q %v, bands %v, compositions %v, both keys present", tc.args, out, tc.q, tc.bands, tc.compositions)
		}
	}
}

// bandmf with one band is Poisson sampling over all examples at rate
// batch/examples, DP-SGD's accounting: "train account -mechanism bandmf"
// without -bands used to build its own composition without a rate and
// fail with "sampling rate q = 0".
func TestAccountBandMFOneBandIsDPSGD(t *testing.T) {
	epsilon := func(args ...string) float64 {
		t.Helper()
		code, out, stderr := runCLI(t, append([]string{"account", "-accountant", "rdp", "-sigma", "1.1", "-steps", "500", "-format", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		var res struct{ Epsilon float64 }
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		return res.Epsilon
	}
	band := epsilon("-mechanism", "bandmf", "-examples", "60000", "-batch", "600")
	dpsgd := epsilon("-mechanism", "dpsgd", "-q", "0.01")
	if band != dpsgd || !(band > 0) {
		t.Errorf("bandmf with one band: epsilon %v, DP-SGD at q = 0.01: %v; want equal", band, dpsgd)
	}
}

// "train account -mechanism allocation" accounts random allocation: epochs
// of t = examples/batch steps (here 10, so 3 compositions in 30 steps),
// with less epsilon than the same noise without amplification (one
// Gaussian of sensitivity sqrt(3)); the RDP accountant, which has no
// random allocation, is refused as a usage error.
func TestAccountAllocation(t *testing.T) {
	code, out, stderr := runCLI(t, "account", "-mechanism", "allocation", "-examples", "1000", "-batch", "100", "-steps", "30", "-sigma", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Epsilon      float64
		Q            float64
		Bands        int
		Compositions int
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runCLI(t, "account", "-mechanism", "gaussian", "-sigma", fmt.Sprint(3/math.Sqrt(3)))
	if code != 0 {
		t.Fatalf("gaussian: exit %d: %s", code, stderr)
	}
	var g struct{ Epsilon float64 }
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatal(err)
	}
	if res.Compositions != 3 || res.Q != 0.1 || res.Bands != 1 || !(res.Epsilon > 0 && res.Epsilon < g.Epsilon) {
		t.Fatalf("allocation: %+v; unamplified epsilon %v", res, g.Epsilon)
	}
	if code, _, stderr := runCLI(t, "account", "-mechanism", "allocation", "-accountant", "rdp", "-examples", "1000", "-batch", "100", "-sigma", "3"); code != 2 || !strings.Contains(stderr, "pld only") {
		t.Fatalf("rdp: exit %d, %q", code, stderr)
	}
}
