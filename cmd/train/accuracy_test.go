package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Augmentation multiplicity and adaptive clipping reach the command line,
// and what a run did is in its claim: the -json result's plan and ledger
// and the saved model file name the augmentation (with K) and the
// adaptive clipping (its release and the gradient's noise multiplier).
func TestRunAugmentMultiplicityAdaptiveClip(t *testing.T) {
	dir := t.TempDir()
	out, model := filepath.Join(dir, "result.json"), filepath.Join(dir, "m.dpmf")
	code, stdout, stderr := runCLI(t, "run", "-data", "embedded", "-model", "logistic", "-steps", "6", "-batch", "100",
		"-mechanism", "dpsgd", "-epsilon", "4", "-augment", "3", "-clip-quantile", "0.6",
		"-seed", "accuracy cli test", "-insecure-seed", "-json", out, "-save-model", model, "-cache", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	var res struct {
		Plan struct {
			Adaptive *struct {
				Target float64 `json:"target_quantile"`
				Noise  float64 `json:"count_noise_std"`
			} `json:"adaptive_clipping"`
			GradientSigma float64 `json:"gradient_noise_multiplier"`
			Sigma         float64 `json:"noise_multiplier"`
			Ledger        struct {
				Assumptions []string `json:"assumptions"`
			} `json:"ledger"`
		} `json:"plan"`
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	p := res.Plan
	if p.Adaptive == nil || p.Adaptive.Target != 0.6 || p.Adaptive.Noise != 5 || !(p.GradientSigma > p.Sigma) {
		t.Fatalf("plan: adaptive %+v, gradient sigma %v, sigma %v", p.Adaptive, p.GradientSigma, p.Sigma)
	}
	all := strings.Join(p.Ledger.Assumptions, "\n")
	for _, want := range []string{"augmentation multiplicity 3", "adaptive clipping (Andrew et al. 2021)"} {
		if !strings.Contains(all, want) {
			t.Fatalf("the ledger does not say %q:\n%s", want, all)
		}
	}
	mb, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"augmentation multiplicity 3", "adaptive clipping (Andrew et al. 2021)"} {
		if !bytes.Contains(mb, []byte(want)) {
			t.Fatalf("the model file's claim does not say %q", want)
		}
	}
}

// Refusals are one line with exit status 2.
func TestRunAccuracyFlagRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-model", "scatternet", "-augment", "2"}, "cached features cannot be reused"},
		{[]string{"-augment", "-1"}, "-augment -1"},
		{[]string{"-clip-quantile", "1.5"}, "-clip-quantile 1.5"},
		{[]string{"-clip-quantile-noise", "3"}, "apply with -clip-quantile only"},
		{[]string{"-clip-quantile", "0.5", "-clip-quantile-noise", "0.1", "-mechanism", "dpsgd"}, "leaves no budget for the gradient"},
		{[]string{"-clip-quantile", "0.5", "-non-private"}, "non-private"},
		{[]string{"-groups", "4"}, `groups 4: only scatternet and wrn16-4 have GroupNorm layers, not "logistic"`},
		{[]string{"-groups", "-1"}, "groups -1: want a positive number"},
		{[]string{"-model", "wrn16-4", "-groups", "3"}, "3 groups must divide 16 channels"},
	} {
		args := append([]string{"run", "-data", "embedded", "-model", "logistic", "-steps", "2", "-batch", "50", "-epsilon", "2", "-cache", t.TempDir()}, tc.args...)
		code, _, stderr := runCLI(t, args...)
		if code != 2 || strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line saying %q", tc.args, code, stderr, tc.want)
		}
	}
}
