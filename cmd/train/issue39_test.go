package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/train"
)

// Issue 39 item 5: two output flags naming one file are refused before
// any work, whatever the spelling (relative, through a symbolic link);
// an input named as an output too. Before the fix -checkpoint X
// -save-model X trained and replaced the checkpoint with the model (seen
// failing: exit 0).
func TestCollidingOutputPathsRefused(t *testing.T) {
	dir := t.TempDir()
	x := filepath.Join(dir, "x")
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "cfg.json")
	os.WriteFile(cfg, []byte(`{"steps": 4}`), 0o644)
	for _, c := range []struct {
		a    []string
		want string
	}{
		{[]string{"-checkpoint", x, "-save-model", x}, "-checkpoint and -save-model name the same file"},
		{[]string{"-metrics", x, "-json", x}, "-metrics and -json name the same file"},
		{[]string{"-json", x + ".png", "-plot", filepath.Join(link, "x.png")}, "-json and -plot name the same file"},
		{[]string{"-config", cfg, "-json", cfg}, "-config and -json name the same file"},
	} {
		code, stdout, stderr := runCLI(t, args(c.a...)...)
		what := strings.Join(c.a, " ")
		checkOneLine(t, what, code, stderr)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "data:") {
			t.Errorf("%s: exit %d, stderr %q, stdout %q: want %q before the data is loaded", what, code, stderr, stdout, c.want)
		}
		for _, f := range []string{x, x + ".png"} {
			if _, err := os.Stat(f); err == nil {
				t.Fatalf("%s: %s was written", what, f)
			}
		}
	}
	if b, _ := os.ReadFile(cfg); string(b) != `{"steps": 4}` {
		t.Fatalf("-config file changed: %q", b)
	}
	// Distinct files stay accepted.
	if code, _, stderr := runCLI(t, args("-metrics", filepath.Join(dir, "m"), "-json", filepath.Join(dir, "j"))...); code != 0 {
		t.Fatalf("distinct outputs: exit %d: %s", code, stderr)
	}
}

// Issue 39 item 8: more noise is never less private. Before the fix the
// PLD accountant gave epsilon +Inf at sigma 1e16 (and failed at 1e200),
// and train run -sigma 1e50 was refused as an infeasible privacy target;
// seen failing. A multiplier whose noise the float32 model cannot hold is
// refused saying so.
func TestHugeNoiseIsPrivate(t *testing.T) {
	for _, sigma := range []string{"1e16", "1e50", "1e200"} {
		code, stdout, stderr := runCLI(t, "account", "-mechanism", "dpsgd", "-q", "0.01", "-steps", "100", "-sigma", sigma, "-format", "table")
		if code != 0 || !strings.Contains(stdout, "epsilon 0 ") {
			t.Errorf("account -sigma %s: exit %d, %s%s; want epsilon 0", sigma, code, stdout, stderr)
		}
	}
	code, stdout, stderr := runCLI(t, "run", "-data", "embedded", "-train-examples", "600", "-model", "logistic",
		"-mechanism", "dpsgd", "-batch", "60", "-steps", "2", "-cache", "", "-sigma", "1e16")
	if code != 0 || !strings.Contains(stdout, "privacy: (epsilon 0, delta 1e-05)") {
		t.Errorf("run -sigma 1e16: exit %d: %s%s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "run", "-data", "embedded", "-train-examples", "600", "-model", "logistic",
		"-mechanism", "dpsgd", "-batch", "60", "-steps", "2", "-cache", "", "-sigma", "1e50")
	checkOneLine(t, "run -sigma 1e50", code, stderr)
	if code != exitUsage || !strings.Contains(stderr, "beyond the float32 arithmetic") || strings.Contains(stderr, "infeasible") {
		t.Errorf("run -sigma 1e50: exit %d, %q", code, stderr)
	}
}

// Issue 39 item 10: the result JSON (the run's ledger) whose directory
// vanished during the run is written next to the checkpoint, as the model
// is, and the error says where. Before the fix it was lost (seen failing).
func TestResultJSONSavedNextToCheckpoint(t *testing.T) {
	dir := t.TempDir()
	inv := &runInvocation{}
	inv.r.jsonOut = filepath.Join(dir, "removed", "result.json")
	inv.r.ckpt = filepath.Join(dir, "run.ckpt")
	err := inv.writeJSON(io.Discard, &train.Result{Steps: 7})
	alt, _ := filepath.Glob(filepath.Join(dir, "result.json.*"))
	if err == nil || len(alt) != 1 || !strings.Contains(err.Error(), "the result was saved to "+alt[0]) || strings.Contains(err.Error(), "atomicfile") {
		t.Fatalf("error %v, fallback files %v: want the result next to the checkpoint and the error naming it", err, alt)
	}
	var got train.Result
	if b, rerr := os.ReadFile(alt[0]); rerr != nil || json.Unmarshal(b, &got) != nil || got.Steps != 7 {
		t.Fatalf("fallback file: %v, %+v", rerr, got)
	}
}

// Issue 39 item 9: values that were silently ignored or read otherwise are
// refused before the data is loaded (-validation -1 trained as 0,
// -worker-timeout 0 with local workers, -non-private with -epsilon); a
// CSV with a UTF-8 byte-order mark (Excel) is read; categorical values a
// model never saw are read as unknown with a note on stderr. Seen failing
// before the fix (exit 0; the BOM file exited 2: "\ufeffid" not found).
func TestSilentlyAcceptedInput(t *testing.T) {
	for _, c := range []struct {
		a    []string
		want string
	}{
		{args("-validation", "-1"), "-validation -1 must not be negative"},
		{args("-workers", "2", "-worker-timeout", "0"), "-worker-timeout 0s must be at least 1s"},
		{[]string{"run", "-data", "embedded", "-non-private", "-epsilon", "3", "-steps", "2"}, "-non-private trains without privacy: -epsilon would be ignored"},
		{[]string{"run", "-data", "embedded", "-non-private", "-sigma", "1", "-delta", "1e-6", "-steps", "2"}, "-delta, -sigma would be ignored"},
	} {
		code, stdout, stderr := runCLI(t, c.a...)
		what := strings.Join(c.a, " ")
		checkOneLine(t, what, code, stderr)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "data:") {
			t.Errorf("%s: exit %d, %q; want %q before the data is loaded", what, code, stderr, c.want)
		}
	}

	dir := t.TempDir()
	plain, bom := filepath.Join(dir, "plain.csv"), filepath.Join(dir, "bom.csv")
	writeTable(t, plain, 300, 3)
	b, _ := os.ReadFile(plain)
	os.WriteFile(bom, append([]byte("\ufeff"), b...), 0o644)
	model := filepath.Join(dir, "m.dpmf")
	code, _, stderr := runCLI(t, "run", "-data", "csv", "-dir", bom, "-label", "label", "-categorical", "city", "-ignore", "id",
		"-model", "tabular", "-steps", "2", "-batch", "50", "-non-private", "-cache", "", "-save-model", model)
	if code != 0 {
		t.Fatalf("CSV with a byte-order mark: exit %d: %s", code, stderr)
	}
	// Two rows of a city the model never saw.
	unseen := filepath.Join(dir, "unseen.csv")
	os.WriteFile(unseen, []byte("\ufeffid,income,city,noise,label\nx,0.5,tokyo,0,high\ny,0.1,oslo,0,low\nz,1,tokyo,0,high\n"), 0o644)
	note := `note: -dir ` + unseen + `: 2 of 3 rows have a value of column "city" not seen in training, read as unknown`
	code, _, stderr = runCLI(t, "eval", "-model-file", model, "-data", "csv", "-dir", unseen)
	if code != 0 || !strings.Contains(stderr, note) {
		t.Errorf("eval: exit %d, stderr %q; want %q", code, stderr, note)
	}
	code, stdout, stderr := runCLI(t, "predict", "-model-file", model, "-format", "csv", "-input", unseen)
	if code != 0 || !strings.Contains(stderr, "2 of 3 rows have a value of column \"city\" not seen in training") || strings.Count(stdout, "\n") != 4 {
		t.Errorf("predict: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// Issue 39 item 11: input the user fixes exits 2, checked first: a -cache
// that cannot be written (found only after the factorization was built),
// a directory given as predict -input or plot -metrics; an account the
// PLD grid cannot hold says to use -accountant rdp. Before the fix each
// exited 1 (seen failing).
func TestUserFixableInputExitsTwoFirst(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	dir := t.TempDir()
	for _, c := range []struct {
		a    []string
		want string
	}{
		{args("-cache", filepath.Join(file, "cache")), "-cache " + filepath.Join(file, "cache") + ": cannot create it"},
		{[]string{"compare", "-n", "16", "-cache", filepath.Join(file, "cache")}, "-cache"},
		{[]string{"predict", "-model-file", file, "-input", dir}, "-input " + dir + " is a directory"},
		{[]string{"plot", "-metrics", dir}, "-metrics " + dir + " is a directory"},
		{[]string{"account", "-mechanism", "dpsgd", "-q", "0.01", "-sigma", "1", "-steps", "1000000000000"}, "-accountant rdp"},
	} {
		code, stdout, stderr := runCLI(t, c.a...)
		what := strings.Join(c.a, " ")
		checkOneLine(t, what, code, stderr)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "data:") {
			t.Errorf("%s: exit %d, %q; want 2 and %q", what, code, stderr, c.want)
		}
	}
	// compare caches in the user's cache directory by default, as run does.
	_, stdout, stderr := runCLI(t, "compare", "-h")
	if want := `(default "` + defaultCacheDir() + `")`; defaultCacheDir() == "" || !strings.Contains(stdout+stderr, want) {
		t.Errorf("compare -h does not say the cache defaults to %s:\n%s", defaultCacheDir(), stdout+stderr)
	}
}

// Issue 39 item 13: flag values that are wrong whatever the data are
// refused before the data set is loaded (no "data:" line), with the
// library's own message; -momentum shows as a number in -h; -save-model
// names the file it wrote, as -plot does. Before the fix each of these
// printed the data line first, -h showed "-momentum beta" and -save-model
// printed nothing (seen failing).
func TestFlagsCheckedBeforeData(t *testing.T) {
	for _, c := range []struct {
		flag, value, want string
	}{
		{"-model", "resnet", `model "resnet": want logistic`},
		{"-workload", "foo", `workload "foo": want optimizer or prefix`},
		{"-delta", "2", "delta 2 must lie in (0,1)"},
		{"-lr", "-1", "learning rate -1 must be positive"},
		{"-cooldown", "2", "cooldown fraction 2 must lie in [0,1]"},
		{"-momentum", "2", "momentum 2 must lie in [0,1)"},
		{"-ema", "2", "EMA decay 2 must lie in [0,1)"},
		{"-clip-per-layer", "1,x", "want positive numbers"},
	} {
		code, stdout, stderr := runCLI(t, "run", "-data", "embedded", "-steps", "2", c.flag, c.value)
		what := c.flag + " " + c.value
		checkOneLine(t, what, code, stderr)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "data:") {
			t.Errorf("%s: exit %d, stderr %q, stdout %q: want %q before the data is loaded", what, code, stderr, stdout, c.want)
		}
	}
	_, stdout, stderr := runCLI(t, "run", "-h")
	if h := stdout + stderr; !strings.Contains(h, "-momentum float") || strings.Contains(h, "-momentum beta") {
		t.Errorf("run -h: -momentum not shown as a float")
	}
	model := filepath.Join(t.TempDir(), "m.dpmf")
	code, stdout, stderr := runCLI(t, args("-save-model", model)...)
	if code != 0 || !strings.Contains(stdout, "model: "+model+"\n") {
		t.Errorf("-save-model: exit %d, stdout %q, stderr %q: want the model's path said", code, stdout, stderr)
	}
}

// Issue 39 item 18: -optimizer adam trains with Adam (optim.NewAdam) on
// the same privacy plan as SGD: Adam reads the privatized gradients only,
// which the claim's assumptions say. Before the fix -optimizer was an
// unknown flag (seen failing, exit 2).
func TestOptimizerAdam(t *testing.T) {
	run := func(opt string) map[string]any {
		t.Helper()
		code, stdout, stderr := runCLI(t, args("-optimizer", opt, "-seed", "adam-test", "-insecure-seed", "-json", "-")...)
		if code != 0 {
			t.Fatalf("-optimizer %s: exit %d: %s", opt, code, stderr)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("-optimizer %s: %v", opt, err)
		}
		return res
	}
	sgd, adam := run("sgd"), run("adam")
	ps, pa := sgd["plan"].(map[string]any), adam["plan"].(map[string]any)
	for _, k := range []string{"epsilon", "delta", "noise_multiplier", "noise_std", "mechanism", "workload"} {
		if fmt.Sprint(ps[k]) != fmt.Sprint(pa[k]) {
			t.Errorf("plan %s: sgd %v, adam %v: want the same claim", k, ps[k], pa[k])
		}
	}
	if b, _ := json.Marshal(pa); !strings.Contains(string(b), "Adam: its moments and updates are computed from the privatized gradients only") {
		t.Errorf("adam's plan does not name Adam as post-processing: %s", b)
	}
	if fmt.Sprint(sgd["final"]) == fmt.Sprint(adam["final"]) {
		t.Errorf("adam and sgd ended identically: %v", adam["final"])
	}
	for _, c := range []struct {
		a    []string
		want string
	}{
		{args("-optimizer", "adam", "-momentum", "0.9"), "Adam keeps its own first moment"},
		{args("-optimizer", "rmsprop"), `optimizer "rmsprop": want sgd or adam`},
	} {
		code, stdout, stderr := runCLI(t, c.a...)
		checkOneLine(t, strings.Join(c.a, " "), code, stderr)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "data:") {
			t.Errorf("%v: exit %d, %q", c.a, code, stderr)
		}
	}
}

// Issue 39 item 18: -data npy trains on a directory of NumPy arrays
// (Keras's x_train.npy, y_train.npy, x_test.npy, y_test.npy); a damaged
// array is refused with one line and exit 2. Before the fix -data npy was
// an unknown dataset (seen failing).
func TestDataNPY(t *testing.T) {
	dir := t.TempDir()
	tr, te, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, d *data.Dataset, n int) {
		var x, y []byte
		for i := 0; i < n; i++ {
			for _, v := range d.Example(i) {
				x = append(x, byte(v*255+0.5))
			}
			y = binary.LittleEndian.AppendUint64(y, uint64(d.Y[i]))
		}
		os.WriteFile(filepath.Join(dir, "x_"+name+".npy"), npyFile("|u1", fmt.Sprintf("(%d, 28, 28)", n), x), 0o644)
		os.WriteFile(filepath.Join(dir, "y_"+name+".npy"), npyFile("<i8", fmt.Sprintf("(%d,)", n), y), 0o644)
	}
	write("train", tr, 600)
	write("test", te, 200)
	a := []string{"run", "-data", "npy", "-dir", dir, "-model", "logistic", "-mechanism", "dpsgd", "-accountant", "rdp",
		"-batch", "60", "-steps", "20", "-cache", ""}
	code, stdout, stderr := runCLI(t, a...)
	if code != 0 || !strings.Contains(stdout, "data: NumPy arrays in "+dir+" (600 train, 200 test examples)") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	os.WriteFile(filepath.Join(dir, "y_test.npy"), []byte("not numpy"), 0o644)
	code, _, stderr = runCLI(t, a...)
	checkOneLine(t, "damaged npy", code, stderr)
	if code != exitUsage || !strings.Contains(stderr, "npy: wrong magic") {
		t.Errorf("damaged y_test.npy: exit %d, %q", code, stderr)
	}
}

// npyFile is a version 1.0 .npy file.
func npyFile(dtype, shape string, payload []byte) []byte {
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }\n", dtype, shape)
	b := binary.LittleEndian.AppendUint16([]byte("\x93NUMPY\x01\x00"), uint16(len(h)))
	return append(append(b, h...), payload...)
}

// Issue 39 item 13: a corrupt factorization cache entry is rebuilt with a
// notice naming the file and what is wrong with it. Before the fix it was
// rebuilt without a word (seen failing).
func TestCorruptCacheEntryNoticed(t *testing.T) {
	for _, kind := range []string{"mf-single", "toeplitz:4"} {
		cache := t.TempDir()
		a := []string{"run", "-data", "embedded", "-train-examples", "600", "-batch", "50", "-steps", "12", "-model", "logistic",
			"-mechanism", kind, "-momentum", "0.9", "-epsilon", "8", "-cache", cache, "-seed", "1", "-insecure-seed"}
		if code, _, stderr := runCLI(t, a...); code != 0 {
			t.Fatalf("%s: exit %d: %s", kind, code, stderr)
		}
		entries, _ := filepath.Glob(filepath.Join(cache, "*"))
		if len(entries) != 1 {
			t.Fatalf("%s: cache holds %v", kind, entries)
		}
		b, _ := os.ReadFile(entries[0])
		b[len(b)/2] ^= 0xff
		os.WriteFile(entries[0], b, 0o644)
		code, _, stderr := runCLI(t, a...)
		if code != 0 || !strings.Contains(stderr, "factorization: cache entry "+entries[0]+" is unusable (") ||
			!strings.Contains(stderr, "building it again") {
			t.Errorf("%s: exit %d, stderr:\n%s", kind, code, stderr)
		}
	}
}

// Issue 39 item 18: -data images trains on PNG images in class folders
// (train/CLASS, test/CLASS); an image of another size is refused with one
// line and exit 2. Before the fix -data images was unknown (seen failing).
func TestDataImages(t *testing.T) {
	dir := t.TempDir()
	tr, _, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 240; i++ {
		img := image.NewGray(image.Rect(0, 0, 28, 28))
		for j, v := range tr.Example(i) {
			img.Pix[j] = byte(v*255 + 0.5)
		}
		split := "train"
		if i >= 200 {
			split = "test"
		}
		p := filepath.Join(dir, split, fmt.Sprintf("class%d", tr.Y[i]), fmt.Sprintf("%d.png", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		var b bytes.Buffer
		png.Encode(&b, img)
		os.WriteFile(p, b.Bytes(), 0o644)
	}
	a := []string{"run", "-data", "images", "-dir", dir, "-model", "logistic", "-mechanism", "dpsgd", "-accountant", "rdp",
		"-batch", "20", "-steps", "10", "-cache", ""}
	code, stdout, stderr := runCLI(t, a...)
	if code != 0 || !strings.Contains(stdout, "data: images in "+dir+" (200 train, 40 test examples)") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	var b bytes.Buffer
	png.Encode(&b, image.NewGray(image.Rect(0, 0, 5, 5)))
	os.WriteFile(filepath.Join(dir, "test", fmt.Sprintf("class%d", tr.Y[200]), "small.png"), b.Bytes(), 0o644)
	code, _, stderr = runCLI(t, a...)
	checkOneLine(t, "image of another size", code, stderr)
	if code != exitUsage || !strings.Contains(stderr, "all images must have one size") {
		t.Errorf("image of another size: exit %d, %q", code, stderr)
	}
}

// Issue 39 item 11: what the coordinator of local workers refuses is
// refused before any worker is started, in one line. Before the fix the
// workers were started first, and each printed its own refusal before the
// coordinator's (seen failing: two lines, "workers: 2 local processes").
func TestWorkerRefusalsBeforeWorkersStart(t *testing.T) {
	t.Setenv(cliAsMainEnv, "1") // started workers run as the program
	for _, a := range [][]string{
		{"-users", "10", "-user-level"},
		{"-batch", "100000"},
		// The planner's own refusal and a per-layer clip count that is
		// not the model's: both came after the workers had started
		// (exit 1 and two lines for the clip count; seen failing).
		{"-mechanism", "bandmf:5000"},
		{"-sampling", "poisson"},
		{"-clip-per-layer", "1,2,3"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"run", "-data", "embedded", "-steps", "4", "-workers", "2"}, a...)...)
		what := strings.Join(a, " ")
		checkOneLine(t, what, code, stderr)
		if code != exitUsage || strings.Contains(stdout+stderr, "workers:") || strings.Contains(stderr, "worker 0/2") {
			t.Errorf("-workers 2 %s: exit %d, stdout %q, stderr %q", what, code, stdout, stderr)
		}
	}
}

// Issue 39 item 13: a resume that adds a setting the checkpoint's run did
// not set is refused in one line, exit 2, naming the default it ran with.
// Before the fix the line read "checkpoint has (not recorded)" (seen
// failing).
func TestResumeMismatchSaysWhatHappened(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "run.ckpt")
	base := []string{"run", "-data", "embedded", "-train-examples", "600", "-model", "logistic", "-mechanism", "dpsgd",
		"-accountant", "rdp", "-batch", "60", "-steps", "4", "-cache", "", "-checkpoint", ckpt}
	if code, _, stderr := runCLI(t, base...); code != 0 {
		t.Fatal(stderr)
	}
	code, stdout, stderr := runCLI(t, append(base, "-ema", "0.9")...)
	checkOneLine(t, "resume with -ema", code, stderr)
	want := "parameter average: checkpoint has none (its run did not set it), asked for 0.9"
	if code != exitUsage || !strings.Contains(stderr, want) || strings.Contains(stderr, "not recorded") || strings.Contains(stdout, "accuracy") {
		t.Errorf("resume with -ema: exit %d, %q; want exit %d naming %q", code, stderr, exitUsage, want)
	}
}
