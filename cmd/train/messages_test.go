package main

import (
	"os"
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
