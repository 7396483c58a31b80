package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/data"
)

// Issue 17 item 1: "train run" with the default dataset and no -dir falls
// back to the embedded subset as plain "train" does, saying so on the data
// line; an explicit -dir that cannot be read stays an error (see
// TestDataDirMissingCorruptOrOfAnotherFormat).
func TestRunWithoutDirFallsBackToEmbedded(t *testing.T) {
	if _, err := os.Stat(data.DefaultFashionMNISTDir); err == nil {
		t.Skipf("skipped because %s exists (Debian's dataset-fashion-mnist is installed), so there is nothing to fall back from", data.DefaultFashionMNISTDir)
	}
	for _, cmd := range [][]string{{"run"}, {}} {
		a := append(cmd, "-train-examples", "600", "-model", "logistic", "-mechanism", "dpsgd",
			"-accountant", "rdp", "-batch", "60", "-steps", "2", "-cache", "")
		code, stdout, stderr := runCLI(t, a...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", cmd, code, stderr)
		}
		if !strings.Contains(stdout, "data: embedded Fashion-MNIST subset (Debian's dataset-fashion-mnist not installed)") {
			t.Fatalf("%v: the data line does not say it fell back:\n%s", cmd, stdout)
		}
	}
	// -data fashion-mnist given explicitly, still without -dir, falls back too.
	code, _, stderr := runCLI(t, "run", "-data", "fashion-mnist", "-train-examples", "600", "-model", "logistic",
		"-mechanism", "dpsgd", "-accountant", "rdp", "-batch", "60", "-steps", "2", "-cache", "")
	if code != 0 {
		t.Fatalf("-data fashion-mnist without -dir: exit %d: %s", code, stderr)
	}
}

// Issue 17 (account): epsilon +Inf is a legitimate answer (no finite
// guarantee). JSON writes it as the string "+Inf" (README, stable keys);
// the table says so in words.
func TestAccountInfiniteEpsilon(t *testing.T) {
	a := []string{"account", "-mechanism", "dpsgd", "-q", "1", "-steps", "100", "-sigma", "1e-8", "-delta", "1e-5"}
	code, stdout, stderr := runCLI(t, append(a, "-format", "json")...)
	if code != 0 {
		t.Fatalf("json: exit %d: %s", code, stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("not JSON: %v: %s", err, stdout)
	}
	if res["epsilon"] != "+Inf" || res["sigma"] != 1e-8 {
		t.Fatalf("epsilon %#v (sigma %v), want \"+Inf\": %s", res["epsilon"], res["sigma"], stdout)
	}
	code, stdout, stderr = runCLI(t, append(a, "-format", "table")...)
	if code != 0 || !strings.Contains(stdout, "epsilon = +Inf (no finite guarantee)") {
		t.Fatalf("table: exit %d: %s%s", code, stdout, stderr)
	}
	// A finite epsilon stays a number.
	code, stdout, _ = runCLI(t, "account", "-mechanism", "gaussian", "-sigma", "1", "-format", "json")
	if err := json.Unmarshal([]byte(stdout), &res); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	if _, ok := res["epsilon"].(float64); !ok {
		t.Fatalf("finite epsilon %#v is not a number", res["epsilon"])
	}
}

// A run whose noise gives no finite epsilon is refused with one line (its
// result, ledger and metrics therefore always hold finite epsilons).
func TestRunWithoutFiniteEpsilonRefused(t *testing.T) {
	code, stdout, stderr := runCLI(t, "run", "-data", "embedded", "-train-examples", "600", "-model", "logistic",
		"-mechanism", "dpsgd", "-batch", "600", "-steps", "2", "-cache", "", "-sigma", "1e-200")
	checkOneLine(t, "sigma 1e-200", code, stderr)
	if !strings.Contains(stderr, "no finite epsilon") || strings.Contains(stdout, "test accuracy") {
		t.Fatalf("stderr %q, stdout %q", stderr, stdout)
	}
}

// Issue 17 item 10: every error of the command line's common paths is one
// line with the program's prefix once, then the message: no sentinel words
// ("invalid argument", "invalid configuration") layered into the text, no
// prefix said twice, no panic.
func TestErrorLinesHaveOnePrefix(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, []byte("x"), 0o644)
	// Corrupt files: text, and a byte string declaring 4 GiB.
	garbage := filepath.Join(t.TempDir(), "garbage")
	os.WriteFile(garbage, []byte("garbage\n"), 0o644)
	huge := filepath.Join(t.TempDir(), "huge")
	os.WriteFile(huge, []byte{0x81, 0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd', 0xc6, 0xff, 0xff, 0xff, 0xff}, 0o644)
	cases := [][]string{
		{"run", "-data", "embedded", "-steps", "2", "-non-private", "-checkpoint", garbage},
		{"run", "-data", "embedded", "-steps", "2", "-non-private", "-checkpoint", huge},
		{"eval", "-model-file", garbage, "-data", "embedded"},
		{"eval", "-model-file", huge, "-data", "embedded"},
		{"compare", "-n", "64", "-factorization", garbage},
		{"compare", "-n", "64", "-factorization", huge},
		{"run", "-data", "embedded", "-mechanism", "bandmf:5000", "-steps", "10"},
		{"run", "-data", "embedded", "-mechanism", "bandmf:0", "-steps", "10"},
		{"run", "-data", "embedded", "-mechanism", "nope", "-steps", "10"},
		{"run", "-data", "embedded", "-accountant", "xyz", "-steps", "10"},
		{"run", "-data", "embedded", "-model", "resnet", "-steps", "2"},
		{"run", "-data", "embedded", "-batch", "100000", "-steps", "2"},
		{"run", "-data", "embedded", "-epsilon", "-3", "-steps", "2"},
		{"run", "-data", "embedded", "-workload", "foo", "-steps", "2"},
		{"run", "-data", "embedded", "-delta", "2", "-steps", "2"},
		{"run", "-data", "embedded", "-clip", "-1", "-steps", "2"},
		{"run", "-data", "embedded", "-lr", "-1", "-steps", "2"},
		{"run", "-data", "embedded", "-cooldown", "2", "-steps", "2"},
		{"run", "-data", "embedded", "-hidden", "0", "-steps", "2"},
		{"run", "-data", "embedded", "-sigma", "-1", "-steps", "2"},
		{"run", "-data", "embedded", "-model", "logistic", "-clip-per-layer", "1,2,3", "-steps", "2", "-cache", ""},
		{"run", "-data", "mnist", "-dir", missing},
		{"run", "-data", "mnist", "-dir", notDir},
		{"run", "-data", "nope"},
		{"compare", "-n", "16", "-mechanisms", "nope"},
		{"compare", "-n", "0"},
		{"account", "-mechanism", "dpsgd", "-q", "2", "-sigma", "1"},
		{"account", "-mechanism", "gaussian", "-epsilon", "1e-9"},
		{"nope"},
	}
	for _, a := range cases {
		code, _, stderr := runCLI(t, a...)
		what := strings.Join(a, " ")
		checkOneLine(t, what, code, stderr)
		// atomicfile is internal: its name and sentinel text stay out of
		// the user's line.
		for _, bad := range []string{"invalid argument", "invalid configuration", "panic", "goroutine", "atomicfile", "corrupt or foreign file"} {
			if strings.Contains(stderr, bad) {
				t.Errorf("%s: %q says %q", what, stderr, bad)
			}
		}
	}
	// The message after the prefixes is the library's, and the exit status
	// still says bad input.
	code, _, stderr := runCLI(t, "run", "-data", "embedded", "-mechanism", "bandmf:5000", "-steps", "10")
	if want := "train: privacy: bandmf:5000 has 5000 bands, more than the 10 steps\n"; stderr != want || code != exitUsage {
		t.Errorf("exit %d, %q; want exit %d, %q", code, stderr, exitUsage, want)
	}
	// A message says what is wrong, not just the value.
	code, _, stderr = runCLI(t, "run", "-data", "embedded", "-sigma", "-1", "-steps", "2")
	if !strings.Contains(stderr, "noise multiplier -1 must be positive") || code != exitUsage {
		t.Errorf("-sigma -1: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "run", "-data", "embedded", "-model", "logistic", "-clip-per-layer", "1,2,3", "-steps", "2", "-cache", "")
	if stderr != "train: clip: new: 3 per-layer norms for 1 layers\n" || code != exitUsage {
		t.Errorf("-clip-per-layer: exit %d, %q", code, stderr)
	}
}

// Issue 17 item 1: -data mnist on a directory of (real) Fashion-MNIST is
// refused with one line naming what the directory holds and the -data to
// use; so is cifar10 on CIFAR-100.
func TestDataNameCheckedAgainstContent(t *testing.T) {
	fashion := idxDir(t)
	code, stdout, stderr := runCLI(t, "run", "-data", "mnist", "-dir", fashion, "-steps", "2")
	checkOneLine(t, "mnist on Fashion-MNIST", code, stderr)
	want := "train: -data mnist: " + fashion + " holds Fashion-MNIST (its pixel statistics fall in Fashion-MNIST's range, about 50% of pixels exactly zero and mean intensity 0.29, far from MNIST's, about 81% of pixels exactly zero and mean intensity 0.13), not MNIST; use -data fashion-mnist\n"
	if stderr != want || code != exitUsage || strings.Contains(stdout, "data:") {
		t.Errorf("exit %d, stderr\n%q, want\n%q", code, stderr, want)
	}
	c100 := t.TempDir()
	for _, f := range []string{"train.bin", "test.bin"} {
		os.WriteFile(filepath.Join(c100, f), make([]byte, 2+3*32*32), 0o644)
	}
	code, _, stderr = runCLI(t, "run", "-data", "cifar10", "-dir", c100, "-steps", "2")
	checkOneLine(t, "cifar10 on CIFAR-100", code, stderr)
	if !strings.Contains(stderr, "holds CIFAR-100 files, not CIFAR-10; use -data cifar100") {
		t.Errorf("cifar10 on CIFAR-100: %q", stderr)
	}
}
