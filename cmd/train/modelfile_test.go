package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/train"
)

// TestSaveModelEvalPredict: a private run on the embedded Fashion-MNIST
// subset saves its model; train eval reports exactly the run's final test
// accuracy and loss; the file carries the run's privacy claim; train
// predict's probabilities sum to 1 and its classes give the same accuracy.
func TestSaveModelEvalPredict(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.dpmf")
	_, final := runThenEval(t, model, []string{"-data", "embedded", "-model", "mlp", "-hidden", "16", "-steps", "8", "-batch", "100",
		"-mechanism", "dpsgd", "-epsilon", "8", "-seed", "model-file-test", "-insecure-seed", "-cache", ""}, []string{"-data", "embedded"}, 1000)

	tr, err := models.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	p := tr.Metadata.Privacy
	if !p.Private || math.Abs(p.Epsilon-8) > 1e-3 || p.Delta != 1e-5 || p.Mechanism != "dpsgd" || p.Accountant != "pld" ||
		len(p.Assumptions) == 0 || len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "-seed") {
		t.Fatalf("privacy claim %+v", p)
	}
	if tr.Metadata.Dataset != "fashion-mnist-embedded/train" || tr.Metadata.Classes != 10 || tr.Metadata.Steps != 8 {
		t.Fatalf("metadata %+v", tr.Metadata)
	}

	_, test, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	var jl, cv strings.Builder
	for i := range test.Len() {
		x := test.Example(i)
		jb, _ := json.Marshal(x)
		fmt.Fprintf(&jl, "%s\n", jb)
		if i == 3 {
			jl.WriteString("\n") // empty lines are skipped
		}
		for j, v := range x {
			if j > 0 {
				cv.WriteByte(',')
			}
			cv.WriteString(strconv.FormatFloat(float64(v), 'g', -1, 32))
		}
		cv.WriteByte('\n')
	}
	jin, cin := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "in.csv")
	os.WriteFile(jin, []byte(jl.String()), 0o644)
	os.WriteFile(cin, []byte(cv.String()), 0o644)

	code, out, stderr := runCLI(t, "predict", "-model-file", model, "-input", jin)
	if code != 0 {
		t.Fatalf("predict: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != test.Len() {
		t.Fatalf("%d output lines for %d inputs", len(lines), test.Len())
	}
	jsonClasses := make([]int, len(lines))
	correct := 0
	for i, l := range lines {
		var row struct {
			Class int       `json:"class"`
			Probs []float64 `json:"probabilities"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil || len(row.Probs) != 10 {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		checkProbs(t, i, row.Class, row.Probs)
		jsonClasses[i] = row.Class
		if row.Class == test.Y[i] {
			correct++
		}
	}
	if acc := float64(correct) / float64(test.Len()); acc != final.Accuracy {
		t.Fatalf("predict's classes are %v accurate, the run's evaluation %v", acc, final.Accuracy)
	}

	code, out, stderr = runCLI(t, "predict", "-model-file", model, "-input", cin, "-format", "csv")
	if code != 0 {
		t.Fatalf("predict csv: exit %d: %s", code, stderr)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) != test.Len()+1 || strings.Join(recs[0], ",") != "class,p0,p1,p2,p3,p4,p5,p6,p7,p8,p9" {
		t.Fatalf("csv output: %v, %d records, header %v", err, len(recs), recs[0])
	}
	for i, r := range recs[1:] {
		c, _ := strconv.Atoi(r[0])
		probs := make([]float64, len(r)-1)
		for j := range probs {
			probs[j], _ = strconv.ParseFloat(r[j+1], 64)
		}
		checkProbs(t, i, c, probs)
		if c != jsonClasses[i] {
			t.Fatalf("example %d: csv class %d, json class %d", i, c, jsonClasses[i])
		}
	}
}

func checkProbs(t *testing.T, i, class int, probs []float64) {
	t.Helper()
	sum, best := 0.0, 0
	for j, p := range probs {
		if !(p >= 0 && p <= 1) {
			t.Fatalf("example %d: probability %v", i, p)
		}
		if p > probs[best] {
			best = j
		}
		sum += p
	}
	if math.Abs(sum-1) > 1e-5 || probs[class] != probs[best] {
		t.Fatalf("example %d: class %d, probabilities %v (sum %v)", i, class, probs, sum)
	}
}

// TestModelFileBadInput: missing, corrupt and mismatched model files and
// malformed inputs exit with status 2 and one line naming the problem.
func TestModelFileBadInput(t *testing.T) {
	dir := t.TempDir()
	m, err := models.NewMLP([3]int{1, 2, 2}, []int{3}, 2, nn.Tanh, 1)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if err := models.WriteFile(good, m, models.Metadata{Dataset: "toy", Classes: 2}); err != nil {
		t.Fatal(err)
	}
	blob, _ := os.ReadFile(good)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, blob[:len(blob)-3], 0o644)
	in := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "-data", "embedded"}, "-model-file is required"},
		{[]string{"eval", "-model-file", filepath.Join(dir, "none"), "-data", "embedded"}, "no such file"},
		{[]string{"eval", "-model-file", bad, "-data", "embedded"}, "corrupt or unreadable model file: truncated"},
		{[]string{"eval", "-model-file", good, "-data", "embedded"}, "expects [1 2 2] inputs and 2 classes; embedded Fashion-MNIST subset has [1 28 28] and 10"},
		{[]string{"eval", "-model-file", good, "-format", "xml"}, `-format "xml": want text or json`},
		{[]string{"predict", "-model-file", good, "-input", in("short.jsonl", "[1,2,3,4]\n[1,2,3]\n")}, "predict: input line 2: 3 features, the model takes 4 (1x2x2, CHW order)"},
		{[]string{"predict", "-model-file", good, "-input", in("text.jsonl", "[1,2,3,4]\n\nhello\n")}, "predict: input line 3: want a JSON array of numbers"},
		{[]string{"predict", "-model-file", good, "-input", in("big.csv", "1,2,3,1e39\n"), "-format", "csv"}, `predict: input line 1: feature 3: "1e39" is not a number`},
		{[]string{"predict", "-model-file", good, "-input", in("nan.csv", "1,2,NaN,4\n"), "-format", "csv"}, "predict: input line 1: feature 2 is NaN"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
	// A good input predicts.
	code, out, stderr := runCLI(t, "predict", "-model-file", good, "-input", in("ok.csv", "1,2,3,4\n0,0,0,0\n"), "-format", "csv")
	if code != 0 || strings.Count(out, "\n") != 3 {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
}

// TestSaveModelEvalWRN: a WideResNet-16-4 run saves its model (a network
// of residual blocks and GroupNorm, described layer by layer in the file)
// and train eval reports exactly the run's final accuracy and loss. Slow
// (two forward passes of WRN-16-4 over 1000 images: 9 s on two idle
// cores, up to a minute on busy ones), so it is skipped under -short.
func TestSaveModelEvalWRN(t *testing.T) {
	if testing.Short() {
		t.Skip("two WRN-16-4 forward passes over 1000 test images take 9 s to a minute; run without -short")
	}
	model := filepath.Join(t.TempDir(), "wrn.dpmf")
	runThenEval(t, model, []string{"-data", "embedded", "-model", "wrn16-4", "-train-examples", "64", "-steps", "2", "-batch", "16",
		"-eval-every", "1000", "-mechanism", "dpsgd", "-epsilon", "8", "-seed", "wrn-model-file-test", "-insecure-seed", "-cache", ""},
		[]string{"-data", "embedded"}, 1000)
	tr, err := models.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if a := tr.Architecture; a.Name != "wrn16-4" || len(a.Layers) != 11 || a.Layers[1].Kind != models.ResidualLayer {
		t.Fatalf("architecture %s with %d layers", a.Name, len(a.Layers))
	}
}

// finalEval is the final evaluation in the JSON result of train run.
type finalEval struct {
	Loss     float64 `json:"test_loss"`
	Accuracy float64 `json:"test_accuracy"`
}

// runThenEval runs "train run" with runArgs, saving the model to model,
// then "train eval -model-file model -format json" with evalArgs, and
// fails unless eval reports exactly the run's final test accuracy and loss
// on n examples. It returns the run's log and final evaluation.
func runThenEval(t *testing.T, model string, runArgs, evalArgs []string, n int) (string, finalEval) {
	t.Helper()
	result := model + ".json"
	code, stdout, stderr := runCLI(t, append([]string{"run", "-save-model", model, "-json", result}, runArgs...)...)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	var res struct{ Final finalEval }
	b, err := os.ReadFile(result)
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("run result: %v %s", err, b)
	}
	code, out, stderr := runCLI(t, append([]string{"eval", "-model-file", model, "-format", "json"}, evalArgs...)...)
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	var ev map[string]float64
	if err := json.Unmarshal([]byte(out), &ev); err != nil || len(ev) != 3 {
		t.Fatalf("eval output %q: %v", out, err)
	}
	if ev["examples"] != float64(n) || ev["accuracy"] != res.Final.Accuracy || ev["loss"] != res.Final.Loss {
		t.Fatalf("eval %v, the run's final evaluation %+v", ev, res.Final)
	}
	return stdout, res.Final
}

// TestScatterNetRecipeSaveEval runs the shipped recipe file
// (configs/fashion-scatternet.json) shrunk by explicit flags on the
// embedded subset: the model file records that it reads scattering
// features, train eval applies them to the raw test images and reports
// exactly the run's final evaluation (which used the parameter average),
// and the -json claim lists the features and the average.
func TestScatterNetRecipeSaveEval(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "scatter.dpmf")
	runArgs := []string{"-config", filepath.Join("..", "..", "configs", "fashion-scatternet.json"),
		"-data", "embedded", "-train-examples", "200", "-steps", "4", "-batch", "50", "-eval-every", "1000",
		"-epsilon", "3", "-seed", "scatternet-recipe-test", "-insecure-seed", "-cache", dir}
	stdout, _ := runThenEval(t, model, runArgs, []string{"-data", "embedded"}, 1000)
	// Issue 39 item 2: the final line says how the features came: computed
	// the first time, read from the cache the next.
	if !regexp.MustCompile(`test accuracy .* after 4 steps \([0-9.]+s, of which [0-9.]+s computing the features\)`).MatchString(stdout) {
		t.Errorf("first run's output does not end saying the features were computed:\n%s", stdout)
	}
	code, again, stderr := runCLI(t, append([]string{"run"}, runArgs...)...)
	if code != 0 {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	if !regexp.MustCompile(`test accuracy .* after 4 steps \([0-9.]+s; features read from the cache in [0-9.]+s\)`).MatchString(again) ||
		!strings.Contains(again, "read from the cache "+dir) {
		t.Errorf("second run's output does not say the features were read from the cache:\n%s", again)
	}
	tr, err := models.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Metadata.Features != "scatter" || tr.Architecture.Name != "scatternet" || tr.Architecture.Input != [3]int{81, 7, 7} {
		t.Fatalf("model file: features %q, architecture %s with input %v", tr.Metadata.Features, tr.Architecture.Name, tr.Architecture.Input)
	}
	b, err := os.ReadFile(model + ".json")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scattering transform (Morlet wavelets, J = 2, L = 8", "moving average of the parameters (decay 0.999)"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("-json result does not state %q", want)
		}
	}
	claim := strings.Join(tr.Metadata.Privacy.Assumptions, "\n")
	if !strings.Contains(claim, "scattering transform") || !strings.Contains(claim, "moving average") {
		t.Errorf("the model file's claim omits the features or the average: %s", claim)
	}

	// predict takes images, as eval does, and applies the model's features:
	// it used to want the 3969 scattering features on each input line.
	_, test, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	var jl strings.Builder
	for i := range n {
		jb, _ := json.Marshal(test.Example(i))
		fmt.Fprintf(&jl, "%s\n", jb)
	}
	in := filepath.Join(dir, "images.jsonl")
	if err := os.WriteFile(in, []byte(jl.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, "predict", "-model-file", model, "-input", in)
	if code != 0 {
		t.Fatalf("predict on images: exit %d: %s", code, stderr)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sub, err := test.Subset(idx)
	if err != nil {
		t.Fatal(err)
	}
	feat, err := train.ApplyFeatures(context.Background(), train.FeaturesScatter, sub)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := tr.Predict(feat.X)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n {
		t.Fatalf("%d output lines for %d images", len(lines), n)
	}
	for i, l := range lines {
		var row struct {
			Class int `json:"class"`
		}
		if err := json.Unmarshal([]byte(l), &row); err != nil || row.Class != want[i] {
			t.Fatalf("image %d: predict says %q, the model on its features %d (%v)", i, l, want[i], err)
		}
	}
}
