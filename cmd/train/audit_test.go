package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAuditJSONContract(t *testing.T) {
	code, out, stderr := runCLI(t, "audit", "-data", "embedded", "-steps", "20", "-batch", "100", "-mechanism", "dpsgd",
		"-epsilon", "4", "-seed", "cli audit", "-insecure-seed", "-canaries", "200", "-audit", "whitebox", "-format", "json", "-cache", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"epsilon", "delta", "epsilon_lower_bound", "confidence", "canaries", "mechanism", "audit"} {
		if _, ok := res[k]; !ok {
			t.Fatalf("result lacks %q: %s", k, out)
		}
	}
	if res["audit"] != "whitebox" || res["mechanism"] != "dpsgd" || res["canaries"].(float64) != 200 || res["confidence"].(float64) != 0.95 {
		t.Fatalf("result does not echo the audit: %s", out)
	}
	if eps, lb := res["epsilon"].(float64), res["epsilon_lower_bound"].(float64); !(eps > 3.9 && eps <= 4) || lb < 0 || lb > eps {
		t.Fatalf("claimed %v, lower bound %v: want a bound in [0, claim] for a correct run", eps, lb)
	}
}

func TestUnsafeNoiseScaleWarnsAndIsRefusedByRun(t *testing.T) {
	code, out, stderr := runCLI(t, "audit", "-data", "embedded", "-steps", "20", "-batch", "100", "-mechanism", "dpsgd",
		"-epsilon", "1", "-seed", "cli audit", "-insecure-seed", "-canaries", "200", "-unsafe-noise-scale", "0.25", "-cache", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "WARNING: -unsafe-noise-scale 0.25") || !strings.Contains(out, "WARNING") {
		t.Errorf("no warning on stderr and in the log:\nstderr %q\nstdout %q", stderr, out)
	}
	for _, args := range [][]string{
		{"run", "-data", "embedded", "-steps", "2", "-unsafe-noise-scale", "0.25"},
		{"run", "-data", "embedded", "-steps", "2", "--unsafe-noise-scale=0.25"},
		{"run", "-data", "embedded", "-steps", "2", "-canaries", "10"},
		{"audit", "-data", "embedded", "-steps", "2", "-audit", "greybox"},
		{"audit", "-data", "embedded", "-steps", "2", "-unsafe-noise-scale", "0"},
		{"audit", "-data", "embedded", "-steps", "2", "-canaries", "1"},
		{"audit", "-data", "embedded", "-steps", "2", "-confidence", "1"},
		{"audit", "-data", "embedded", "-steps", "2", "-non-private"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr)
		}
		if strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 || !strings.HasPrefix(stderr, "train: ") {
			t.Errorf("%v: stderr is not one line: %q", args, stderr)
		}
	}
	_, _, stderr = runCLI(t, "run", "-data", "embedded", "-unsafe-noise-scale", "0.25")
	if !strings.Contains(stderr, "refused by train run") {
		t.Errorf("train run -unsafe-noise-scale: %q does not say it is refused", stderr)
	}
}
