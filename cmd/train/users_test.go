package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/models"
)

// writeUserTable writes writeTable's rows with a user column first: users
// u0, u1, ... own skewed numbers of rows (1 to about 40).
func writeUserTable(t *testing.T, path string, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	tmp := path + ".plain"
	writeTable(t, tmp, n, seed)
	b, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var sb strings.Builder
	sb.WriteString("user," + lines[0] + "\n")
	user, left := 0, 0
	for _, l := range lines[1:] {
		if left == 0 {
			user++
			left = 1 + int(rng.ExpFloat64()*10)
		}
		left--
		fmt.Fprintf(&sb, "u%d,%s\n", user, l)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestUserLevelCSV is the README's user-level example: a CSV file with a
// user column, trained at user level (users sampled, at most 4 rows of a
// user a step, clipped together), saved, and evaluated by train eval on a
// held-out file (whose user column is skipped). The result JSON, its
// ledger and the model file all say the unit is the user.
func TestUserLevelCSV(t *testing.T) {
	dir := t.TempDir()
	trainCSV, testCSV := filepath.Join(dir, "train.csv"), filepath.Join(dir, "test.csv")
	writeUserTable(t, trainCSV, 3000, 1)
	writeUserTable(t, testCSV, 500, 2)
	model := filepath.Join(dir, "users.dpmf")
	stdout, final := runThenEval(t, model, []string{"-data", "csv", "-dir", trainCSV, "-test-file", testCSV, "-label", "label",
		"-user", "user", "-user-level", "-user-examples", "4", "-categorical", "city", "-ignore", "id", "-model", "tabular",
		"-hidden", "16", "-steps", "100", "-batch", "100", "-mechanism", "blt:4", "-epsilon", "4",
		"-seed", "user-level-csv-test", "-insecure-seed", "-cache", ""},
		[]string{"-data", "csv", "-dir", testCSV}, 500)
	t.Logf("user-level blt:4 test accuracy %.4f", final.Accuracy)
	if final.Accuracy < 0.75 {
		t.Errorf("user-level tabular accuracy %.3f, want >= 0.75", final.Accuracy)
	}
	if !strings.Contains(stdout, "per user under zero-out adjacency") {
		t.Errorf("the plan does not state the unit:\n%s", stdout)
	}
	var res struct {
		Users int
		Plan  struct {
			Unit      string
			UserBound struct {
				Examples int `json:"examples_per_step"`
			} `json:"user_bound"`
			Ledger struct {
				Unit   string
				Params map[string]any
			}
		}
	}
	b, err := os.ReadFile(model + ".json")
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("result JSON: %v", err)
	}
	if res.Users < 50 || res.Plan.Unit != "user" || res.Plan.Ledger.Unit != "user" || res.Plan.UserBound.Examples != 4 || res.Plan.Ledger.Params["users"] == nil {
		t.Errorf("result JSON: plan unit %q, ledger unit %q, bound %d, params %v", res.Plan.Unit, res.Plan.Ledger.Unit, res.Plan.UserBound.Examples, res.Plan.Ledger.Params)
	}
	tr, err := models.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if p := tr.Metadata.Privacy; p.Unit != "user" || !strings.Contains(p.String(), "per user") {
		t.Errorf("model file claim %q (unit %q): want per user", p.String(), p.Unit)
	}
}

// User-level flags that cannot mean what they say exit 2 with one line.
func TestUserLevelFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "t.csv")
	writeUserTable(t, csvPath, 200, 3)
	for _, args := range [][]string{
		// No owners: a user-level claim without users.
		{"run", "-data", "embedded", "-steps", "2", "-user-level"},
		{"run", "-data", "csv", "-dir", csvPath, "-label", "label", "-categorical", "city", "-ignore", "id,user", "-user-level"},
		// Bounding knobs without user level.
		{"run", "-data", "embedded", "-steps", "2", "-users", "10", "-user-mean"},
		{"run", "-data", "embedded", "-steps", "2", "-users", "10", "-user-level", "-user-examples", "0"},
		// Two owner assignments; a user column outside CSV.
		{"run", "-data", "csv", "-dir", csvPath, "-label", "label", "-categorical", "city", "-ignore", "id", "-user", "user", "-users", "5"},
		{"run", "-data", "embedded", "-steps", "2", "-user", "who"},
		// More users a step than there are users; a non-private user-level run.
		{"run", "-data", "embedded", "-steps", "2", "-users", "10", "-user-level", "-batch", "11"},
		{"run", "-data", "embedded", "-steps", "2", "-users", "10", "-user-level", "-non-private"},
		{"run", "-data", "embedded", "-steps", "2", "-users", "10", "-user-level", "-clip-per-layer", "1,1"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, stderr)
		}
		if strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 || !strings.HasPrefix(stderr, "train: ") {
			t.Errorf("%v: stderr is not one line: %q", args, stderr)
		}
	}
}

// train audit at user level: canary users of k examples, the JSON says so,
// and a correct run stays below its claim.
func TestUserLevelAuditCLI(t *testing.T) {
	code, out, stderr := runCLI(t, "audit", "-data", "embedded", "-users", "300", "-user-level", "-user-examples", "3",
		"-steps", "20", "-batch", "100", "-mechanism", "dpsgd", "-epsilon", "4", "-seed", "cli user audit", "-insecure-seed",
		"-canaries", "200", "-audit", "whitebox", "-format", "json", "-cache", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if res["unit"] != "user" || res["canary_examples"].(float64) != 3 {
		t.Fatalf("unit %v, canary examples %v: want user, 3", res["unit"], res["canary_examples"])
	}
	if eps, lb := res["epsilon"].(float64), res["epsilon_lower_bound"].(float64); !(eps > 3.9 && eps <= 4) || lb < 0 || lb > eps {
		t.Fatalf("claimed %v, lower bound %v: want a bound in [0, claim] for a correct run", eps, lb)
	}
}
