package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/models"
)

// Issue 28 item 1: -save-model and -plot are checked with the other
// output paths, before the data is loaded: a private run never spends
// its budget for a model it cannot write. Before the fix -save-model
// trained the whole run, then exited 1 (seen failing).
func TestSaveModelAndPlotPathsCheckedBeforeTraining(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "dir")
	for _, f := range []string{"-save-model", "-plot"} {
		code, stdout, stderr := runCLI(t, args(f, filepath.Join(missing, "m.png"))...)
		checkOneLine(t, f, code, stderr)
		if code != 2 || !strings.Contains(stderr, f+" ") || strings.Contains(stdout, "data:") {
			t.Errorf("%s: exit %d, stderr %q, stdout %q: want the path refused before the data is loaded", f, code, stderr, stdout)
		}
	}
}

// Issue 28 item 1: a finished model whose own path fails is written next
// to the checkpoint, and the error says where.
func TestFinishedModelSavedNextToCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "run.ckpt")
	gone := filepath.Join(dir, "removed", "m.dpmf")
	var wrote []string
	err := saveModelOrFallback(gone, ckpt, func(p string) error {
		if err := os.WriteFile(p, []byte("model"), 0o644); err != nil {
			return err
		}
		wrote = append(wrote, p)
		return nil
	})
	if err == nil || len(wrote) != 1 || filepath.Dir(wrote[0]) != dir || !strings.Contains(err.Error(), "saved to "+wrote[0]) {
		t.Fatalf("error %v, written %v: want the model next to the checkpoint and the error naming it", err, wrote)
	}
	if b, _ := os.ReadFile(wrote[0]); string(b) != "model" {
		t.Fatal("fallback file not written")
	}
}

// Issue 28 item 4: a zero that the library reads as "unset" is refused
// when given explicitly, instead of silently meaning the default. Before
// the fix -clip 0 trained with clip norm 1 (seen failing, exit 0).
func TestExplicitZeroThatMeansDefaultRefused(t *testing.T) {
	for _, f := range []string{"-clip", "-lr", "-sigma", "-delta", "-eval-every", "-bands", "-embedding-dim"} {
		code, stdout, stderr := runCLI(t, args(f, "0")...)
		checkOneLine(t, f+" 0", code, stderr)
		if code != 2 || !strings.Contains(stderr, f+" 0: want") || strings.Contains(stdout, "test accuracy") {
			t.Errorf("%s 0: exit %d, stderr %q", f, code, stderr)
		}
	}
	// Zeros that are values stay accepted.
	for _, a := range [][]string{{"-momentum", "0"}, {"-cooldown", "0"}, {"-train-examples", "0"}} {
		if code, _, stderr := runCLI(t, args(a...)...); code != 0 {
			t.Errorf("%v: exit %d %s", a, code, stderr)
		}
	}
}

// Issue 28 item 6: input the user can fix exits 2, per command. Before the
// fix each of these exited 1 (seen failing).
func TestUserFixableInputExitsTwo(t *testing.T) {
	dir := t.TempDir()
	empty := t.TempDir()
	truncated, corruptGz := idxDir(t), idxDir(t)
	p := filepath.Join(truncated, "train-labels-idx1-ubyte.gz")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)/2], 0o644)
	p = filepath.Join(corruptGz, "train-labels-idx1-ubyte.gz")
	b, _ = os.ReadFile(p)
	b[len(b)/2] ^= 0x5a
	os.WriteFile(p, b, 0o644)
	m, err := models.NewLogistic([3]int{1, 28, 28}, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "m.dpmf")
	if err := models.WriteFile(model, m, models.Metadata{Dataset: "fashion-mnist", Classes: 10}); err != nil {
		t.Fatal(err)
	}
	notFact := filepath.Join(dir, "f.txt")
	os.WriteFile(notFact, []byte("not a factorization\n"), 0o644)
	garbage := filepath.Join(dir, "garbage.ckpt")
	os.WriteFile(garbage, []byte("definitely not a checkpoint"), 0o644)
	ckpt := filepath.Join(dir, "run.ckpt")
	if code, _, stderr := runCLI(t, args("-checkpoint", ckpt)...); code != 0 {
		t.Fatal(stderr)
	}
	cases := [][]string{
		{"run", "-data", "fashion-mnist", "-dir", filepath.Join(empty, "missing"), "-steps", "2"},
		{"run", "-data", "fashion-mnist", "-dir", empty, "-steps", "2"},
		{"run", "-data", "fashion-mnist", "-dir", truncated, "-steps", "2"},
		{"run", "-data", "fashion-mnist", "-dir", corruptGz, "-steps", "2"},
		{"eval", "-model-file", model, "-data", "fashion-mnist", "-dir", filepath.Join(empty, "missing")},
		{"eval", "-model-file", model, "-data", "fashion-mnist", "-dir", empty},
		{"eval", "-model-file", model, "-data", "fashion-mnist", "-dir", truncated},
		{"audit", "-data", "fashion-mnist", "-dir", truncated, "-steps", "2"},
		{"audit", "-data", "fashion-mnist", "-dir", filepath.Join(empty, "missing"), "-steps", "2"},
		args("-sigma", "1e-300"),
		{"compare", "-n", "8", "-mechanisms", "dpsgd", "-factorization", filepath.Join(dir, "none.fact")},
		{"compare", "-n", "8", "-mechanisms", "dpsgd", "-factorization", notFact},
		{"compare", "-n", "8", "-mechanisms", "dpsgd", "-plot", filepath.Join(dir, "no", "p.png")},
		args("-checkpoint", garbage),
		args("-checkpoint", ckpt, "-lr", "0.2"),
	}
	for _, a := range cases {
		code, stdout, stderr := runCLI(t, a...)
		checkOneLine(t, fmt.Sprint(a), code, stderr)
		if code != 2 || strings.Contains(stdout, "test accuracy") {
			t.Errorf("%v: exit %d (%s), want 2", a, code, strings.TrimSpace(stderr))
		}
	}
}

// Issue 28 item 5: a resume with other flags names each differing
// setting with both values, before any factorization is built (before the
// fix: minutes of building, then a sentence naming nothing; seen failing).
func TestResumeWithOtherFlagsNamesThem(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	base := []string{"run", "-data", "embedded", "-train-examples", "600", "-model", "logistic", "-mechanism", "bandmf:2",
		"-accountant", "rdp", "-batch", "60", "-steps", "4", "-cache", "", "-checkpoint", ckpt}
	if code, _, stderr := runCLI(t, base...); code != 0 {
		t.Fatal(stderr)
	}
	code, stdout, stderr := runCLI(t, append(base, "-steps", "6", "-lr", "0.2")...)
	checkOneLine(t, "resume", code, stderr)
	for _, want := range []string{"steps: checkpoint has 4, asked for 6", "learning rate: checkpoint has 0.1, asked for 0.2"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("resume with other flags: %q lacks %q", stderr, want)
		}
	}
	if strings.Contains(stdout+stderr, "factorization: building") {
		t.Errorf("factorization built before the refusal:\n%s%s", stdout, stderr)
	}
	// -bands beyond examples/batch: refused before building too.
	code, stdout, stderr = runCLI(t, "run", "-data", "embedded", "-train-examples", "600", "-model", "logistic",
		"-accountant", "rdp", "-batch", "60", "-steps", "4", "-cache", "", "-bands", "100000")
	if code != 2 || strings.Contains(stdout+stderr, "factorization: building") {
		t.Errorf("-bands 100000: exit %d, built first:\n%s%s", code, stdout, stderr)
	}
}

// Issue 28 item 7: help and an unknown command list every command, and
// the binary says its version. Before the fix audit, eval and predict
// were missing and "version" was an unknown command (seen failing).
func TestHelpListsEveryCommandAndVersion(t *testing.T) {
	_, _, help := runCLI(t, "-h")
	_, _, unknown := runCLI(t, "nosuch")
	for _, c := range []string{"run", "compare", "account", "audit", "eval", "predict", "plot", "version"} {
		if !strings.Contains(help, "train "+c) {
			t.Errorf("train -h lacks %q", "train "+c)
		}
		if !strings.Contains(unknown, c) {
			t.Errorf("train nosuch: %q lacks %q", unknown, c)
		}
	}
	for _, a := range [][]string{{"version"}, {"-version"}} {
		code, stdout, stderr := runCLI(t, a...)
		if code != 0 || !strings.HasPrefix(stdout, "train github.com/dpmf-go/dpmf ") || !strings.Contains(stdout, "commit") || stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", a, code, stdout, stderr)
		}
	}
}

// Issue 28 item 8: one progress line per evaluation on standard error,
// off a terminal too, with step, loss, accuracy, epsilon, examples/s and
// time left; standard output keeps the results. A cached factorization is
// named before the plan it feeds. Before the fix nothing was printed off
// a terminal and the cached line came after the plan (seen failing).
func TestProgressLinesOnStderr(t *testing.T) {
	cache := t.TempDir()
	a := []string{"run", "-data", "embedded", "-train-examples", "600", "-model", "logistic", "-mechanism", "bandmf:2",
		"-accountant", "rdp", "-batch", "60", "-steps", "4", "-eval-every", "2", "-cache", cache}
	for round := range 2 {
		code, stdout, stderr := runCLI(t, a...)
		if code != 0 {
			t.Fatal(stderr)
		}
		for _, step := range []string{"step 2 of 4: test loss ", "step 4 of 4: test loss "} {
			i := strings.Index(stderr, step)
			if i < 0 {
				t.Fatalf("stderr lacks %q:\n%s", step, stderr)
			}
			line := stderr[i:]
			line = line[:strings.IndexByte(line, '\n')]
			for _, w := range []string{"test accuracy ", "epsilon ", " examples/s", " left"} {
				if !strings.Contains(line, w) {
					t.Errorf("progress line %q lacks %q", line, w)
				}
			}
		}
		if strings.Contains(stdout, "step 2 of 4") || strings.Contains(stdout, "factorization: building") || !strings.Contains(stdout, "test accuracy") {
			t.Errorf("stdout is not only results:\n%s", stdout)
		}
		if round == 1 {
			cached, plan := strings.Index(stdout, "factorization: cached"), strings.Index(stdout, "mechanism bandmf")
			if cached < 0 || plan < 0 || cached > plan {
				t.Errorf("the cached factorization (at %d) is not named before the plan (at %d):\n%s", cached, plan, stdout)
			}
		}
	}
}

// Issue 28 item 9: messages that say what is wrong. Before the fix:
// "epsilon +Inf must be positive", "parse error", and a corrupt gzip file
// called "oversized" (seen failing).
func TestMessagesSayWhatIsWrong(t *testing.T) {
	corruptGz := idxDir(t)
	p := filepath.Join(corruptGz, "train-labels-idx1-ubyte.gz")
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 0x5a
	os.WriteFile(p, b, 0o644)
	for _, c := range []struct {
		args      []string
		want, not string
	}{
		{args("-epsilon", "Inf"), "finite", "must be positive"},
		{args("-batch", "1e9"), "want an integer", "parse error"},
		{args("-steps", "1.5"), "want an integer", "parse error"},
		{args("-lr", "fast"), "want a number", "parse error"},
		{[]string{"run", "-data", "fashion-mnist", "-dir", corruptGz, "-steps", "2"}, "corrupt", "oversized"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		checkOneLine(t, fmt.Sprint(c.args), code, stderr)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, c.not) {
			t.Errorf("%v: exit %d, %q: want %q, not %q", c.args, code, stderr, c.want, c.not)
		}
	}
}

// Issue 28 item 10: without -epsilon the CSV has no sigma and noise_rmse
// columns (README); with it, it has both. Before the fix they were
// columns of zeros (seen failing).
func TestCompareCSVColumnsFollowEpsilon(t *testing.T) {
	_, out, _ := runCLI(t, "compare", "-n", "8", "-mechanisms", "dpsgd", "-format", "csv", "-cache", "")
	head := strings.SplitN(out, "\n", 2)[0]
	if strings.Contains(head, "sigma") || strings.Contains(head, "noise_rmse") {
		t.Errorf("without -epsilon: header %q", head)
	}
	_, out, _ = runCLI(t, "compare", "-n", "8", "-mechanisms", "dpsgd", "-format", "csv", "-cache", "", "-epsilon", "1")
	head = strings.SplitN(out, "\n", 2)[0]
	if !strings.Contains(head, ",sigma,noise_rmse,") {
		t.Errorf("with -epsilon: header %q", head)
	}
}

// Issue 28 item 2: sizes that cannot fit are refused with the memory they
// would need. Before the fix the first died with "fatal error: runtime:
// out of memory" (seen failing, the test process killed).
func TestSizesThatCannotFitRefusedCLI(t *testing.T) {
	for _, a := range [][]string{
		args("-steps", "9000000000000"),
		{"audit", "-data", "embedded", "-train-examples", "600", "-model", "logistic", "-mechanism", "dpsgd",
			"-batch", "60", "-cache", "", "-canaries", "1000000000", "-steps", "10"},
		args("-model", "mlp", "-hidden", "1000000000"),
	} {
		code, _, stderr := runCLI(t, a...)
		checkOneLine(t, fmt.Sprint(a), code, stderr)
		if code != 2 || !strings.Contains(stderr, "would need") {
			t.Errorf("%v: exit %d, %q: want a refusal stating the memory", a, code, stderr)
		}
	}
}

// The plot of a run: train run -plot draws it at the end, train plot
// draws it from a metrics file (a last line without its newline is being
// written and is skipped).
func TestRunPlot(t *testing.T) {
	dir := t.TempDir()
	metrics, png, svg := filepath.Join(dir, "m.jsonl"), filepath.Join(dir, "run.png"), filepath.Join(dir, "run.svg")
	if code, stdout, stderr := runCLI(t, args("-metrics", metrics, "-plot", png, "-eval-every", "2")...); code != 0 || !strings.Contains(stdout, "plot: "+png) {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("no PNG: %v", err)
	}
	f, _ := os.OpenFile(metrics, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"kind":"step","st`)
	f.Close()
	code, stdout, stderr := runCLI(t, "plot", "-metrics", metrics, "-o", svg)
	if code != 0 || !strings.Contains(stdout, "(4 steps, 2 evaluations)") {
		t.Fatalf("train plot: exit %d: %s%s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("no SVG: %v", err)
	}
	for _, a := range [][]string{
		{"plot"},
		{"plot", "-metrics", filepath.Join(dir, "none.jsonl")},
		{"plot", "-metrics", metrics, "-o", filepath.Join(dir, "x.gif")},
		{"plot", "-metrics", png},
	} {
		code, _, stderr := runCLI(t, a...)
		checkOneLine(t, fmt.Sprint(a), code, stderr)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", a, code)
		}
	}
}
