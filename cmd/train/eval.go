package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/train"
)

// evalResult is the JSON of "train eval"; keys are stable.
type evalResult struct {
	Examples int     `json:"examples"`
	Accuracy float64 `json:"accuracy"`
	Loss     float64 `json:"loss"`
	// Tokens and Perplexity: a next-token model's predicted tokens and
	// exp(Loss), Loss being the mean per token (Accuracy: how often the
	// most likely token is the next); Perplexity is left out when it is
	// past float64's range.
	Tokens     int     `json:"tokens,omitempty"`
	Perplexity float64 `json:"perplexity,omitempty"`
}

// runEval evaluates a saved model on the test split of a dataset with the
// loss and accuracy of training's own evaluation (clip.Engine.Evaluate).
func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", stderr)
	modelFile := fs.String("model-file", "", "model file written by train run -save-model (required)")
	dataset := fs.String("data", "fashion-mnist", "dataset whose test split is evaluated (as for train run), or csv: every row of the -dir file, read with the model's columns, or text: every document of -dir (loss per token and perplexity for a next-token model)")
	dir := fs.String("dir", "", "dataset directory, or the CSV file (as for train run)")
	format := fs.String("format", "text", "text or json")
	var tf evalTextFlags
	tf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return usagef("-format %q: want text or json", *format)
	}
	if *dataset != "text" {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains([]string{"tokenizer", "text-format", "text-field", "label", "labels", "user", "test-fraction"}, f.Name) {
				given = append(given, "-"+f.Name)
			}
		})
		if len(given) > 0 {
			return usagef("%s only apply to -data text", strings.Join(given, ", "))
		}
	}
	tr, err := loadModelFile(*modelFile)
	if err != nil {
		return err
	}
	if *dataset == "text" {
		res, source, err := evalText(ctx, tr, *modelFile, *dir, &tf)
		if err != nil {
			return err
		}
		return writeEval(stdout, *format, res, source, "", tr)
	}
	var test *data.Dataset
	var source string
	if *dataset == "csv" {
		cols := tr.Metadata.Columns
		if cols == nil {
			return usagef("model %s was not trained on a CSV table (its dataset is %q)", *modelFile, tr.Metadata.Dataset)
		}
		if *dir == "" {
			return usagef("-data csv needs -dir FILE.csv")
		}
		spec, vocab := modelSpec(cols, false)
		t, err := readCSVFile("dir", *dir, spec, vocab)
		if err != nil {
			return err
		}
		noteUnknown(stderr, "-dir "+*dir, t)
		test, source = t.Dataset, "CSV "+*dir
	} else if _, test, source, err = loadData(*dataset, *dir, false); err != nil {
		return err
	}
	if test, err = train.ApplyFeatures(ctx, train.Features(tr.Metadata.Features), test); err != nil {
		return err
	}
	a := tr.Architecture
	if got := [3]int{test.Shape.C, test.Shape.H, test.Shape.W}; got != a.Input || test.Classes != a.Classes {
		return usagef("model %s expects %v inputs and %d classes; %s has %v and %d", *modelFile, a.Input, a.Classes, source, got, test.Classes)
	}
	idx := make([]int, test.Len())
	for i := range idx {
		idx[i] = i
	}
	x, y := make([]float32, len(idx)*test.Shape.Size()), make([]int, len(idx))
	if err := test.Batch(idx, x, y); err != nil {
		return err
	}
	// The run evaluated in blocks of its batch size; so does eval, to
	// report the run's numbers bit for bit.
	block := evalBatch
	if b := tr.Metadata.Batch; b > 0 && b <= 1<<16 {
		block = b
	}
	engine, err := clip.New(tr.Model, clip.Options{NonPrivate: true, MaxBatch: block})
	if err != nil {
		return err
	}
	res := evalResult{Examples: len(y)}
	if res.Loss, res.Accuracy, err = engine.EvaluateContext(ctx, x, y); err != nil {
		return err
	}
	split := " test split"
	if *dataset == "csv" {
		split = ""
	}
	return writeEval(stdout, *format, res, source, split, tr)
}

// writeEval writes eval's result as one JSON object or as text.
func writeEval(stdout io.Writer, format string, res evalResult, source, split string, tr *models.Trained) error {
	if format == "json" {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	ppl := ""
	if res.Tokens > 0 {
		ppl = fmt.Sprintf(", %d tokens, perplexity %.4g", res.Tokens, math.Exp(res.Loss))
	}
	_, err := fmt.Fprintf(stdout, "%s%s: %d examples, accuracy %.4f, loss %.4f%s\nmodel: %s trained on %s; privacy: %s\n",
		source, split, res.Examples, res.Accuracy, res.Loss, ppl, tr.Architecture.Name, tr.Metadata.Dataset, tr.Metadata.Privacy)
	return err
}

// evalBatch is the forward-only batch of eval; it sizes buffers only.
const evalBatch = 256

// loadModelFile reads a model file; a missing, corrupt or unreadable one is
// bad input (exit status 2).
func loadModelFile(path string) (*models.Trained, error) {
	if path == "" {
		return nil, usagef("-model-file is required")
	}
	tr, err := models.ReadFile(path)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return tr, nil
}

// saveModel writes the model a run trained, with the run's dataset and
// privacy claim, to path (atomically).
func saveModel(path string, cfg train.Config, res *train.Result, seeded bool, columns *models.Columns) error {
	meta := models.Metadata{Dataset: cfg.Data.Train.Name, Classes: cfg.Data.Train.Classes, Steps: res.Steps, Batch: cfg.Privacy.Batch, Columns: columns, Features: string(cfg.Data.Features)}
	if res.Plan != nil {
		l := res.Plan.Ledger
		meta.Privacy = models.Privacy{Private: true, Epsilon: l.Epsilon, Delta: l.Delta,
			Mechanism: fmt.Sprint(res.Plan.Mechanism), Accountant: l.Accountant, Assumptions: l.Assumptions,
			Unit: string(res.Plan.Unit)}
		if seeded {
			meta.Privacy.Notes = append(meta.Privacy.Notes, "noise generated from the caller's -seed: the guarantee holds only while the seed stays secret")
		}
		if columns != nil {
			meta.Privacy.Notes = append(meta.Privacy.Notes, vocabularyNote)
		}
	}
	if cfg.Model.Built == nil {
		return errors.New("no model to save")
	}
	return models.WriteFile(path, cfg.Model.Built, meta)
}
