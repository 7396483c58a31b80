package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
)

// "train compare -mechanisms" accepts exactly the names "train run
// -mechanism" does: run parses its flag with privacy.ParseMechanism
// (trainConfig), and compare must agree on every name. compare used to
// parse with mfnoise's own list parser, which took bandmf:auto/s2 (run
// refuses it: a stamped encoder's band count cannot be chosen by
// amplified accounting).
func TestCompareAcceptsRunMechanismNames(t *testing.T) {
	names := []string{
		"dpsgd", "tree-online", "tree-full", "fft", "fft-opt", "mf-single", "mf-kb", "bandmf:4", "bandmf:auto",
		"tree-full/s2", "fft/s2", "mf-single/s2", "bandmf:2/s2", "dpsgd/s2",
		"sqrt", "toeplitz:4", "blt:2", "bisr:3", "bsr:4",
		"bsr", "bsr:0", "bsr:4/s2", "bandmf:auto/s2", "sqrt/s2", "blt:2/s2", "blt:40", "tree", "DPSGD", "bandmf", "bandmf:0", "fft/s0", "toeplitz", "nope",
	}
	for _, name := range names {
		_, perr := privacy.ParseMechanism(name)
		code, out, stderr := runCLI(t, "compare", "-n", "16", "-participation", "kb", "-k", "2", "-b", "8",
			"-mechanisms", name, "-format", "json", "-cache", "")
		if (perr == nil) != (code == 0) {
			t.Errorf("%q: train run's parser says %v, compare exits %d: %s", name, perr, code, stderr)
			continue
		}
		if perr != nil {
			if code != 2 || out != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("%q: want one usage line and exit 2, got exit %d, stdout %q, stderr %q", name, code, out, stderr)
			}
			continue
		}
		var rows []mfnoise.CompareRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
			t.Errorf("%q: %v\n%s", name, err, out)
		}
	}
}

// Optimizing a factorization reports progress on stderr, never on stdout:
// a cold compare says what it builds, with iteration lines; a warm one
// (same cache) says once per mechanism that it used the cached one, and
// prints the same JSON.
func TestCompareProgressOnStderr(t *testing.T) {
	cache := t.TempDir()
	args := []string{"compare", "-n", "64", "-participation", "kb", "-k", "2", "-b", "32",
		"-mechanisms", "dpsgd,mf-single,toeplitz:4,blt:2", "-format", "json", "-cache", cache}
	code, cold, coldErr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("cold: exit %d: %s", code, coldErr)
	}
	for _, kind := range []string{"mf-single", "toeplitz:4", "blt:2"} {
		for _, want := range []string{"factorization: building " + kind + " (n = 64)", "factorization: building " + kind + " (n = 64): iteration 1 of at most", "factorization: " + kind + " (n = 64) optimized in"} {
			if !strings.Contains(coldErr, want) {
				t.Errorf("cold stderr lacks %q:\n%s", want, coldErr)
			}
		}
	}
	// The optimal single-participation MF states its certificate; the
	// Toeplitz families have no bound to state.
	if !strings.Contains(coldErr, "factorization: mf-single (n = 64) proven within ") || strings.Contains(coldErr, "toeplitz:4 (n = 64) proven") {
		t.Errorf("cold stderr states the certificates wrongly:\n%s", coldErr)
	}
	if strings.Contains(coldErr, "cached") || strings.Contains(coldErr, "building dpsgd") {
		t.Errorf("cold stderr:\n%s", coldErr)
	}
	code, warm, warmErr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("warm: exit %d: %s", code, warmErr)
	}
	for _, kind := range []string{"mf-single", "toeplitz:4", "blt:2"} {
		if n := strings.Count(warmErr, "factorization: cached "+kind+" for n = 64 from "+cache); n != 1 {
			t.Errorf("warm stderr names the cached %s %d times:\n%s", kind, n, warmErr)
		}
	}
	if strings.Contains(warmErr, "building") {
		t.Errorf("warm run rebuilt:\n%s", warmErr)
	}
	for _, out := range []string{cold, warm} {
		if strings.Contains(out, "factorization") || strings.Contains(out, "iteration") {
			t.Fatalf("progress on stdout:\n%s", out)
		}
	}
	if a, b := withoutBuildSeconds(t, cold), withoutBuildSeconds(t, warm); a != b {
		t.Fatalf("cold and warm JSON differ:\n%s\n%s", a, b)
	}
	// CSV too: stdout is the header and one line per mechanism.
	args[len(args)-3] = "csv"
	code, out, stderr := runCLI(t, args...)
	if code != 0 || strings.Count(out, "\n") != 5 || !strings.HasPrefix(out, "mechanism,") {
		t.Fatalf("csv: exit %d\n%s\n%s", code, out, stderr)
	}
}

// withoutBuildSeconds is the JSON rows with their wall times zeroed.
func withoutBuildSeconds(t *testing.T, out string) string {
	t.Helper()
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) == 0 {
		t.Fatalf("not a JSON array of rows: %v\n%s", err, out)
	}
	for _, r := range rows {
		if _, ok := r["build_seconds"]; !ok {
			t.Fatalf("no build_seconds in %v", r)
		}
		delete(r, "build_seconds")
	}
	b, _ := json.Marshal(rows)
	return string(b)
}

// -factorization scores a user's saved factorization next to the built-in
// mechanisms: the full tree saved to a file scores as tree-full does.
func TestCompareUserFactorization(t *testing.T) {
	w, _ := dpcore.PrefixSum(16)
	f, err := mfnoise.BinaryTree(w, mfnoise.TreeOptions{Decoder: mfnoise.TreeFull})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "my-tree.mf")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := mfnoise.SaveFactorization(file, f); err != nil {
		t.Fatal(err)
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "compare", "-n", "16", "-participation", "kb", "-k", "2", "-b", "8",
		"-mechanisms", "dpsgd,tree-full", "-factorization", path, "-format", "json", "-cache", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []mfnoise.CompareRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("%v\n%s", err, out)
	}
	by := map[string]mfnoise.CompareRow{}
	for _, r := range rows {
		by[r.Mechanism] = r
	}
	mine, tree := by["my-tree"], by["tree-full"]
	if mine.Loss == 0 || math.Abs(mine.Loss-tree.Loss) > 1e-9*tree.Loss || mine.Sensitivity != tree.Sensitivity || mine.StepTime != "O(n d)" {
		t.Fatalf("my-tree %+v, tree-full %+v", mine, tree)
	}
	// Another number of steps, or a missing file: one line, no panic.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "32", "-mechanisms", "dpsgd", "-factorization", path}, "factorizes 16 steps"},
		{[]string{"-n", "50000", "-mechanisms", "", "-factorization", path}, "GiB"},
		{[]string{"-n", "16", "-mechanisms", "dpsgd", "-factorization", path + ".missing"}, "no such file"},
	} {
		code, out, stderr := runCLI(t, append([]string{"compare", "-cache", ""}, tc.args...)...)
		if code == 0 || out != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want one line with %q", tc.args, code, out, stderr, tc.want)
		}
	}
}

// A certified gap is printed rounded up, so "within x%" holds as printed.
func TestRoundUp2(t *testing.T) {
	for x, want := range map[float64]string{0.01234: "0.013", 0.00997: "0.01", 2.07: "2.1", 2.0: "2", 0.2: "0.2", 13.01: "14", 0: "0"} {
		if got := roundUp2(x); got != want {
			t.Errorf("roundUp2(%v) = %s, want %s", x, got, want)
		}
	}
}
