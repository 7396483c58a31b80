package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
)

// csvFlags are the flags of "train run -data csv": which columns hold the
// label and the categories, and which rows are held out.
type csvFlags struct {
	label, categorical, ignore, testFile string
	testFraction                         float64
	user                                 string
}

func (c *csvFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.label, "label", "", "-data csv: the column holding the class (required)")
	fs.StringVar(&c.categorical, "categorical", "", "-data csv: comma-separated columns whose values are categories (embedded by -model tabular); other columns must be numeric")
	fs.StringVar(&c.ignore, "ignore", "", "-data csv: comma-separated columns to skip")
	fs.StringVar(&c.user, "user", "", "-data csv: the column holding each row's owner (user id); not a feature; -user-level protects each user's rows together")
	fs.StringVar(&c.testFile, "test-file", "", "-data csv: CSV file of held-out rows with the same columns (default: hold out -test-fraction of -dir's rows)")
	fs.Float64Var(&c.testFraction, "test-fraction", 0.2, "-data csv without -test-file: fraction of the rows held out as the test split (chosen by a fixed permutation; 0: none)")
}

// csvOnly are the flags that mean something only with -data csv; those
// of textToo also with -data text (fields of JSON lines).
var (
	csvOnly = []string{"label", "categorical", "ignore", "test-file", "test-fraction", "user"}
	textToo = []string{"label", "test-file", "test-fraction", "user"}
)

// validate refuses CSV flags without -data csv and a CSV run without its
// file or label, before anything is read.
func (c *csvFlags) validate(fs *flag.FlagSet, dataset, dir, model string) error {
	if dataset != "csv" {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains(csvOnly, f.Name) && !(dataset == "text" && slices.Contains(textToo, f.Name)) {
				given = append(given, "-"+f.Name)
			}
		})
		if len(given) > 0 {
			return usagef("%s only apply to -data csv", strings.Join(given, ", "))
		}
		if dataset == "text" && !(c.testFraction >= 0 && c.testFraction < 1) {
			return usagef("-test-fraction %v: want a fraction in [0, 1)", c.testFraction)
		}
		if model == "tabular" {
			return usagef("-model tabular needs -data csv (a table with categorical columns)")
		}
		return nil
	}
	if dir == "" {
		return usagef("-data csv needs -dir FILE.csv")
	}
	if c.label == "" {
		return usagef("-data csv needs -label COLUMN")
	}
	if !(c.testFraction >= 0 && c.testFraction < 1) {
		return usagef("-test-fraction %v: want a fraction in [0, 1)", c.testFraction)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// readCSVFile reads a table; every error is bad input, one line.
func readCSVFile(flagName, path string, spec data.TabularSpec, vocab *data.Vocabulary) (*data.Tabular, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("-%s: %v", flagName, err)
	}
	defer f.Close()
	return readCSV("-"+flagName+" "+path, filepath.Base(path), f, spec, vocab)
}

// readCSV reads a table from r; what names r in errors.
func readCSV(what, name string, r io.Reader, spec data.TabularSpec, vocab *data.Vocabulary) (*data.Tabular, error) {
	t, err := data.ReadCSV(r, spec, vocab)
	if err != nil {
		return nil, usagef("%s: %v", what, err)
	}
	t.Name = name
	return t, nil
}

// load reads the training table and its held-out split: -test-file read
// with the training file's columns and vocabulary, or a fixed random
// -test-fraction of the rows.
func (c *csvFlags) load(path string) (trainSet, testSet *data.Dataset, table *data.Tabular, source string, err error) {
	spec := data.TabularSpec{Label: c.label, Categorical: splitList(c.categorical), Ignore: splitList(c.ignore), User: c.user}
	if table, err = readCSVFile("dir", path, spec, nil); err != nil {
		return nil, nil, nil, "", err
	}
	source = fmt.Sprintf("CSV %s (%d numeric, %d categorical columns, label %q)", path, len(table.Numeric), len(table.Categorical), c.label)
	if c.testFile != "" {
		spec := data.TabularSpec{Label: c.label, Categorical: table.Categorical, Numeric: table.Numeric}
		test, err := readCSVFile("test-file", c.testFile, spec, &table.Vocab)
		if err != nil {
			return nil, nil, nil, "", err
		}
		return table.Dataset, test.Dataset, table, source + ", held out: " + c.testFile, nil
	}
	n := table.Len()
	k := int(math.Round(c.testFraction * float64(n)))
	if k == 0 {
		return table.Dataset, nil, table, source + ", no held-out rows", nil
	}
	if k >= n {
		return nil, nil, nil, "", usagef("-test-fraction %v of %d rows leaves none to train on", c.testFraction, n)
	}
	// A fixed permutation: the same file gives the same split on every run.
	perm := rand.New(rand.NewPCG(0x5eed, 0x7e57)).Perm(n)
	testIdx, trainIdx := slices.Sorted(slices.Values(perm[:k])), slices.Sorted(slices.Values(perm[k:]))
	if trainSet, err = table.Subset(trainIdx); err != nil {
		return nil, nil, nil, "", err
	}
	if testSet, err = table.Subset(testIdx); err != nil {
		return nil, nil, nil, "", err
	}
	trainSet.Name, testSet.Name = table.Name+"/train", table.Name+"/test"
	return trainSet, testSet, table, fmt.Sprintf("%s, %d rows held out (-test-fraction %g)", source, k, c.testFraction), nil
}

// vocabularyNote qualifies the privacy claim of a model that stores a
// table's vocabulary.
const vocabularyNote = "the categorical levels and class names stored with the model were read from the training data and are not protected by the guarantee"

// columnsOf is what a model file records of a table.
func columnsOf(t *data.Tabular, label string) *models.Columns {
	return &models.Columns{Label: label, Numeric: slices.Clone(t.Numeric), Categorical: slices.Clone(t.Categorical),
		Levels: slices.Clone(t.Vocab.Levels), Classes: slices.Clone(t.Vocab.Classes)}
}

// modelSpec is how a table is read for the model whose columns are cols;
// noLabel reads inputs to predict.
func modelSpec(cols *models.Columns, noLabel bool) (data.TabularSpec, *data.Vocabulary) {
	return data.TabularSpec{Label: cols.Label, Categorical: cols.Categorical, Numeric: cols.Numeric, NoLabel: noLabel},
		&data.Vocabulary{Levels: cols.Levels, Classes: cols.Classes}
}

// predictTable predicts every row of a CSV table with a header, read with
// the model's columns (the label column, if present, is skipped), and
// writes "class,label,p0,...": the class index, its label value and the
// probabilities.
func predictTable(tr *models.Trained, in io.Reader, name string, out, stderr io.Writer) error {
	spec, vocab := modelSpec(tr.Metadata.Columns, true)
	t, err := readCSV("predict: "+name, name, in, spec, vocab)
	if err != nil {
		return err
	}
	noteUnknown(stderr, "predict: "+name, t)
	k, per := tr.Architecture.Classes, t.Shape.Size()
	if t.Classes != k || [3]int{per, 1, 1} != tr.Architecture.Input {
		return usagef("predict: model file's columns give %d features and %d classes, its network takes %v and %d", per, t.Classes, tr.Architecture.Input, k)
	}
	w := bufio.NewWriter(out)
	hdr := []string{"class", "label"}
	for j := range k {
		hdr = append(hdr, fmt.Sprintf("p%d", j))
	}
	fmt.Fprintln(w, strings.Join(hdr, ","))
	var b []byte
	for lo := 0; lo < t.Len(); lo += predictBatch {
		hi := min(lo+predictBatch, t.Len())
		classes, probs, err := tr.Predict(t.X[lo*per : hi*per])
		if err != nil {
			return err
		}
		for i, c := range classes {
			b = strconv.AppendInt(b[:0], int64(c), 10)
			b = append(b, ',')
			b = csvField(b, tr.Metadata.Columns.Classes[c])
			for _, v := range probs[i*k : (i+1)*k] {
				b = append(b, ',')
				b = strconv.AppendFloat(b, float64(v), 'g', -1, 32)
			}
			b = append(b, '\n')
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
	}
	return w.Flush()
}

// csvField appends s as one CSV field, quoted when it needs to be.
func csvField(b []byte, s string) []byte {
	if !strings.ContainsAny(s, ",\"\r\n") && strings.TrimSpace(s) == s {
		return append(b, s...)
	}
	return append(append(b, '"'), append([]byte(strings.ReplaceAll(s, `"`, `""`)), '"')...)
}

// noteUnknown says, one line per categorical column, how many rows of t
// hold a value the model's vocabulary does not know (read as unknown).
func noteUnknown(w io.Writer, what string, t *data.Tabular) {
	for j, n := range t.Unknown {
		if n > 0 {
			fmt.Fprintf(w, "train: note: %s: %d of %d rows have a value of column %q not seen in training, read as unknown\n", what, n, t.Len(), t.Categorical[j])
		}
	}
}
