package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestCompareScale is issue 17 item 6: dpsgd at n = 50000 used to build a
// dense 20 GB workload (fatal out of memory) and n = 1e8 panicked in
// Workload.Matrix. Structured mechanisms score in O(n) memory; dense ones
// and impossible sizes get one line with the memory they would need.
func TestCompareScale(t *testing.T) {
	code, out, stderr := runCLI(t, "compare", "-n", "50000", "-participation", "minsep", "-k", "10", "-b", "5000",
		"-mechanisms", "dpsgd,sqrt,blt:2", "-format", "json", "-cache", "")
	if code != 0 {
		t.Fatalf("n=50000: exit %d: %s", code, stderr)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("n=50000: %v\n%s", err, out)
	}
	for _, r := range rows {
		if r["mechanism"] == "dpsgd" {
			// DP-SGD: sens sqrt(10), loss 10 * n (n+1) / 2.
			if l := r["loss"].(float64); math.Abs(l/(10*50000*50001/2.0)-1) > 1e-12 {
				t.Fatalf("dpsgd loss %v", l)
			}
		}
		if _, ok := r["build_seconds"]; !ok {
			t.Fatalf("no build_seconds in %v", r)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "100000000", "-mechanisms", "dpsgd"}, "762.9 MiB"},
		{[]string{"-n", "100000000", "-mechanisms", "tree-online"}, "762.9 MiB"},
		{[]string{"-n", "100000000", "-mechanisms", "fft"}, "TiB"},
		{[]string{"-n", "50000", "-mechanisms", "tree-full"}, "93.1 GiB"},
		// The optimizer's 18 work matrices, not the build's 5 (93.1 GiB).
		{[]string{"-n", "50000", "-mechanisms", "mf-single"}, "335.3 GiB (18 x 8 n^2 bytes)"},
	} {
		code, out, stderr := runCLI(t, append([]string{"compare"}, tc.args...)...)
		if code == 0 || out != "" {
			t.Fatalf("%v: exit %d, stdout %q", tc.args, code, out)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "goroutine") {
			t.Fatalf("%v: want one line naming %q, got %q", tc.args, tc.want, stderr)
		}
	}
}

// TestRunToeplitzMechanisms: train run accepts blt:4 (fixed-order,
// unamplified), and toeplitz:BANDS and the banded square root bsr:BANDS
// under band sampling (amplified).
func TestRunToeplitzMechanisms(t *testing.T) {
	for _, tc := range []struct{ mech, want string }{
		{"blt:4", "fixed-order sampling"},
		{"toeplitz:8", "band-poisson sampling"},
		{"bsr:4", "band-poisson sampling"},
	} {
		code, out, stderr := runCLI(t, "run", "-data", "embedded", "-train-examples", "2000", "-batch", "100", "-steps", "16",
			"-model", "logistic", "-mechanism", tc.mech, "-epsilon", "8", "-cache", "", "-seed", "1", "-insecure-seed")
		if code != 0 || !strings.Contains(out+stderr, tc.want) || !strings.Contains(out+stderr, "test accuracy") {
			t.Fatalf("%s: exit %d\n%s\n%s", tc.mech, code, out, stderr)
		}
	}
}
