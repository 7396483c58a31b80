package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClipPerLayerFlag: -clip-per-layer reaches the plan (noise calibrated
// to the bounds' L2 norm) and is refused with -clip or with bad values.
func TestClipPerLayerFlag(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run.json")
	code, _, stderr := runCLI(t, "run", "-data", "embedded", "-model", "mlp", "-hidden", "8", "-steps", "2", "-batch", "50",
		"-mechanism", "dpsgd", "-sigma", "1.25", "-clip-per-layer", "0.6, 1.6", "-seed", "per-layer", "-insecure-seed", "-cache", "", "-json", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Plan struct {
			Std   float64 `json:"noise_std"`
			Sigma float64 `json:"noise_multiplier"`
			Sens  struct {
				Value float64 `json:"value"`
			} `json:"sensitivity"`
		} `json:"plan"`
	}
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if want := 1.25 * math.Hypot(0.6, 1.6) * res.Plan.Sens.Value; res.Plan.Sens.Value == 0 || math.Abs(res.Plan.Std-want) > 1e-12*want {
		t.Fatalf("noise std %v, want %v (%s)", res.Plan.Std, want, b)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-clip", "1", "-clip-per-layer", "1,1"}, "-clip and -clip-per-layer exclude each other"},
		{[]string{"-clip-per-layer", "1,-1"}, `-clip-per-layer "1,-1": want positive numbers`},
		{[]string{"-clip-per-layer", "1,x"}, `-clip-per-layer "1,x": want positive numbers`},
	} {
		code, _, stderr := runCLI(t, append([]string{"run", "-data", "embedded"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q", c.args, code, stderr)
		}
	}
}
