package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// writeTable writes n rows of a table whose label is "high" when
// income + bonus(city) > 0 (oslo +1.5, paris 0, rome -1.5), with a noise
// column and an id column; it returns the labels.
func writeTable(t *testing.T, path string, n int, seed uint64) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	b.WriteString("id,income,city,noise,label\n")
	cities := []string{"oslo", "paris", "rome"}
	bonus := map[string]float64{"oslo": 1.5, "paris": 0, "rome": -1.5}
	var labels []string
	for i := range n {
		inc, city := rng.NormFloat64(), cities[rng.IntN(3)]
		label := "low"
		if inc+bonus[city] > 0 {
			label = "high"
		}
		labels = append(labels, label)
		fmt.Fprintf(&b, "r%d,%.4f,%s,%.4f,%s\n", i, inc, city, rng.NormFloat64(), label)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return labels
}

// TestTabularCLI: train run -data csv -model tabular trains the tabular
// classifier privately on a CSV file the test writes, with a held-out file;
// train eval on that file reports exactly the run's final accuracy and
// loss; train predict reads a table with the columns in another order and
// no label, and its classes are as accurate as eval says.
func TestTabularCLI(t *testing.T) {
	dir := t.TempDir()
	trainCSV, testCSV := filepath.Join(dir, "train.csv"), filepath.Join(dir, "test.csv")
	writeTable(t, trainCSV, 3000, 1)
	labels := writeTable(t, testCSV, 500, 2)
	model := filepath.Join(dir, "tab.dpmf")
	// train eval on the held-out file repeats the run's final evaluation.
	stdout, final := runThenEval(t, model, []string{"-data", "csv", "-dir", trainCSV, "-test-file", testCSV, "-label", "label",
		"-categorical", "city", "-ignore", "id", "-model", "tabular", "-hidden", "16", "-steps", "100", "-batch", "150",
		"-mechanism", "dpsgd", "-epsilon", "4", "-seed", "tabular-cli-test", "-insecure-seed", "-cache", ""},
		[]string{"-data", "csv", "-dir", testCSV}, 500)
	if !strings.Contains(stdout, "note: "+vocabularyNote) {
		t.Errorf("run log does not say that the vocabulary is not protected:\n%s", stdout)
	}
	// The Bayes rate is 100%; ignoring the city gives about 71%.
	t.Logf("tabular via the CLI, DP-SGD eps 4: held-out accuracy %.4f", final.Accuracy)
	if final.Accuracy < 0.85 {
		t.Fatalf("held-out accuracy %.4f, want >= 0.85", final.Accuracy)
	}

	tr, err := models.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	cols := tr.Metadata.Columns
	if tr.Architecture.Name != "tabular" || cols == nil || cols.Label != "label" || strings.Join(cols.Numeric, ",") != "income,noise" ||
		strings.Join(cols.Categorical, ",") != "city" || strings.Join(cols.Classes, ",") != "high,low" {
		t.Fatalf("model file: %s, columns %+v", tr.Architecture.Name, cols)
	}
	if n := tr.Metadata.Privacy.Notes; len(n) != 2 || n[1] != vocabularyNote {
		t.Fatalf("privacy notes %q", n)
	}

	// Inputs to predict: columns reordered, no label, an extra column.
	raw, _ := os.ReadFile(testCSV)
	recs, err := csv.NewReader(strings.NewReader(string(raw))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	in.WriteString("city,comment,noise,income\n")
	for _, r := range recs[1:] {
		fmt.Fprintf(&in, "%s,\"free, text\",%s,%s\n", r[2], r[3], r[1])
	}
	inPath := filepath.Join(dir, "in.csv")
	os.WriteFile(inPath, []byte(in.String()), 0o644)
	code, out, stderr := runCLI(t, "predict", "-model-file", model, "-input", inPath, "-format", "csv")
	if code != 0 {
		t.Fatalf("predict: exit %d: %s", code, stderr)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 501 || strings.Join(rows[0], ",") != "class,label,p0,p1" {
		t.Fatalf("predict output: %v, %d rows, header %v", err, len(rows), rows[0])
	}
	correct := 0
	for i, r := range rows[1:] {
		c, _ := strconv.Atoi(r[0])
		p0, _ := strconv.ParseFloat(r[2], 64)
		p1, _ := strconv.ParseFloat(r[3], 64)
		checkProbs(t, i, c, []float64{p0, p1})
		if r[1] != cols.Classes[c] {
			t.Fatalf("row %d: class %d labelled %q", i, c, r[1])
		}
		if r[1] == labels[i] {
			correct++
		}
	}
	if acc := float64(correct) / 500; acc != final.Accuracy {
		t.Fatalf("predict's classes are %v accurate, the run's evaluation %v", acc, final.Accuracy)
	}
}

// TestTabularCLIEmbeddingDim: -embedding-dim sets the dimension of every
// categorical column's embedding table, as the saved model records.
func TestTabularCLIEmbeddingDim(t *testing.T) {
	dir := t.TempDir()
	path, model := filepath.Join(dir, "t.csv"), filepath.Join(dir, "t.dpmf")
	writeTable(t, path, 200, 5)
	for _, dim := range []int{0, 3} {
		args := []string{"run", "-data", "csv", "-dir", path, "-label", "label", "-categorical", "city", "-ignore", "id",
			"-model", "tabular", "-steps", "2", "-batch", "50", "-non-private", "-seed", "embedding-dim", "-cache", "", "-save-model", model}
		if dim != 0 {
			args = append(args, "-embedding-dim", strconv.Itoa(dim))
		}
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Fatalf("run: exit %d: %s", code, stderr)
		}
		tr, err := models.ReadFile(model)
		if err != nil {
			t.Fatal(err)
		}
		want := dim
		if dim == 0 {
			want = 8
		}
		var tables []string
		for _, p := range tr.Architecture.Params {
			if strings.HasPrefix(p.Name, "embed/") {
				tables = append(tables, fmt.Sprint(p.Shape))
				if len(p.Shape) != 2 || p.Shape[1] != want {
					t.Errorf("-embedding-dim %d: table %s has shape %v, want dimension %d", dim, p.Name, p.Shape, want)
				}
			}
		}
		if len(tables) != 1 {
			t.Fatalf("-embedding-dim %d: embedding tables %v, want one (city)", dim, tables)
		}
	}
}

// TestTabularCLIHoldOut: without -test-file a fixed fraction of the rows is
// held out, the same on every run.
func TestTabularCLIHoldOut(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.csv")
	writeTable(t, path, 400, 3)
	args := []string{"run", "-data", "csv", "-dir", path, "-label", "label", "-categorical", "city", "-ignore", "id",
		"-model", "tabular", "-steps", "3", "-batch", "50", "-non-private", "-seed", "holdout", "-cache", "", "-json", "-"}
	var first string
	for i := range 2 {
		code, out, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("run: exit %d: %s", code, stderr)
		}
		if !strings.Contains(stderr, "80 rows held out (-test-fraction 0.2) (320 train, 80 test examples)") {
			t.Fatalf("log: %s", stderr)
		}
		var res struct{ Final json.RawMessage }
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = string(res.Final)
		} else if string(res.Final) != first {
			t.Fatalf("two runs differ: %s, then %s", first, res.Final)
		}
	}
}

// TestTabularCLIBadInput: malformed tables and flag misuse exit with
// status 2 and one line naming the problem.
func TestTabularCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	good := filepath.Join(dir, "good.csv")
	writeTable(t, good, 50, 4)
	ragged := file("ragged.csv", "x,c,y\n1,a,0\n2,b\n")
	text := file("text.csv", "x,c,y\n1,a,0\nabc,b,1\n")
	img, err := models.NewMLP([3]int{1, 2, 2}, []int{3}, 2, nn.Tanh, 1)
	if err != nil {
		t.Fatal(err)
	}
	imgModel := filepath.Join(dir, "img.dpmf")
	if err := models.WriteFile(imgModel, img, models.Metadata{Dataset: "toy", Classes: 2}); err != nil {
		t.Fatal(err)
	}
	run := func(extra ...string) []string {
		return append([]string{"run", "-steps", "1", "-batch", "10", "-non-private", "-cache", ""}, extra...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{run("-data", "csv", "-dir", ragged, "-label", "y", "-categorical", "c"), "ragged.csv: data: malformed dataset file: csv: line 3 has 2 fields, the header has 3"},
		{run("-data", "csv", "-dir", text, "-label", "y", "-categorical", "c"), `text.csv: data: malformed dataset file: csv: line 3 column "x": "abc" is not a finite number`},
		{run("-data", "csv", "-dir", good, "-label", "class"), `label column "class" is not in the header`},
		{run("-data", "csv", "-dir", good), "-data csv needs -label COLUMN"},
		{run("-data", "csv", "-label", "label"), "-data csv needs -dir FILE.csv"},
		{run("-data", "csv", "-dir", good, "-label", "label", "-test-fraction", "1"), "-test-fraction 1: want a fraction in [0, 1)"},
		{run("-data", "embedded", "-label", "label"), "-label only apply to -data csv"},
		{run("-data", "embedded", "-model", "tabular"), "-model tabular needs -data csv"},
		{run("-data", "csv", "-dir", good, "-label", "label", "-ignore", "id,city", "-model", "tabular"), "model tabular: 0 categorical columns of 2 features (want at least one)"},
		{[]string{"eval", "-model-file", imgModel, "-data", "csv", "-dir", good}, "was not trained on a CSV table"},
		{[]string{"audit", "-data", "csv", "-dir", good}, "-data csv is read by train run and train eval only"},
		{run("-data", "csv", "-dir", good, "-label", "label", "-categorical", "city", "-ignore", "id", "-model", "tabular", "-embedding-dim", "-1"), "embedding dimension -1: want 1 to 4096 (0: 8)"},
		{run("-data", "embedded", "-embedding-dim", "4"), `embedding dimension 4: only the tabular model embeds columns, not "mlp"`},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}
