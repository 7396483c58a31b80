package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
)

// accountJSON runs "train account" with args and decodes its JSON.
func accountJSON(t *testing.T, args ...string) accountResult {
	t.Helper()
	code, out, stderr := runCLI(t, append([]string{"account", "-format", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, stderr)
	}
	var res accountResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %v: %s", args, err, out)
	}
	return res
}

// TestAccountAsksThePlanner: the numbers of "train account" are the
// planner's: the noise multiplier calibrated for DP-SGD and the epsilon of
// amplified BandMF equal those of the plan of a run with the same
// settings (privacy.NewPlan), bit for bit.
func TestAccountAsksThePlanner(t *testing.T) {
	ctx := context.Background()
	const m, batch, steps, delta = 1000, 10, 40, 1e-5
	res := accountJSON(t, "-mechanism", "dpsgd", "-examples", fmt.Sprint(m), "-batch", fmt.Sprint(batch), "-steps", fmt.Sprint(steps),
		"-epsilon", "2", "-delta", fmt.Sprint(delta), "-accountant", "rdp")
	plan, _, err := privacy.NewPlan(ctx, privacy.Request{Mechanism: mfnoise.DPSGD{}, Examples: m, Batch: batch, Steps: steps,
		Sampling: privacy.SamplingPoisson, ClipNorm: 1, Epsilon: 2, Delta: delta, Accountant: privacy.RDP})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sigma != plan.NoiseMultiplier || float64(res.Epsilon) != plan.Epsilon || res.Q == nil || *res.Q != plan.Composition().Rate() {
		t.Errorf("dpsgd: account says sigma %v epsilon %v q %v, the plan %v, %v, %v", res.Sigma, res.Epsilon, res.Q, plan.NoiseMultiplier, plan.Epsilon, plan.Composition().Rate())
	}

	res = accountJSON(t, "-mechanism", "bandmf", "-examples", fmt.Sprint(m), "-batch", fmt.Sprint(batch), "-steps", fmt.Sprint(steps),
		"-bands", "4", "-sigma", "0.9", "-delta", fmt.Sprint(delta), "-accountant", "rdp")
	plan, _, err = privacy.NewPlan(ctx, privacy.Request{Mechanism: mfnoise.BandMF{Bands: 4}, Examples: m, Batch: batch, Steps: steps,
		Sampling: privacy.SamplingBandPoisson, ClipNorm: 1, NoiseMultiplier: 0.9, Delta: delta, Accountant: privacy.RDP})
	if err != nil {
		t.Fatal(err)
	}
	if float64(res.Epsilon) != plan.Epsilon || res.Compositions != plan.Composition().Compositions(steps) {
		t.Errorf("bandmf: account says epsilon %v after %d compositions, the plan %v after %d", res.Epsilon, res.Compositions, plan.Epsilon, plan.Composition().Compositions(steps))
	}
}

// TestCompareAsksThePlanner: the noise multiplier "train compare -epsilon"
// reports is the planner's for one Gaussian mechanism of sensitivity 1,
// the one a float release plan of the same (epsilon, delta) calibrates.
func TestCompareAsksThePlanner(t *testing.T) {
	code, out, stderr := runCLI(t, "compare", "-n", "8", "-mechanisms", "dpsgd,tree-online", "-epsilon", "2", "-delta", "1e-6", "-format", "json", "-cache", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []compareRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	want, err := privacy.GaussianSigma(2, 1e-6)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Sigma != want || r.NoiseRMSE != want*r.RMSE {
			t.Errorf("%s: sigma %v, noise rmse %v; the planner's sigma %v", r.Mechanism, r.Sigma, r.NoiseRMSE, want)
		}
	}
}

// TestRefusalBranchedOnByType: the command line tells a refused plan by
// its type (*privacy.Refusal, wrapped or not), never by its text, and
// exits 2; "train account" names the flag of a RuleBands refusal.
func TestRefusalBranchedOnByType(t *testing.T) {
	r := &privacy.Refusal{Rule: privacy.RuleAmplification, Reason: "mf-single with poisson sampling"}
	if !isInvalid(r) || !isInvalid(fmt.Errorf("train: %w", r)) {
		t.Error("a refusal is not input the user can fix")
	}
	if isInvalid(errors.New(r.Error())) {
		t.Error("an error with a refusal's text but not its type is branched on as a refusal")
	}
	code, _, stderr := runCLI(t, "account", "-mechanism", "bandmf", "-examples", "100", "-batch", "10", "-bands", "11", "-sigma", "1")
	if code != exitUsage || !strings.Contains(stderr, "-bands") || !strings.Contains(stderr, "examples/batch = 10") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("11 bands of 100/10: exit %d: %q, want 2 naming -bands and the limit", code, stderr)
	}
}
