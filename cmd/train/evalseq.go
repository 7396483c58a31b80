package main

import (
	"context"
	"flag"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/seqtrain"
)

// evalTextFlags are the flags of "train eval -data text": how to read and
// tokenize the documents (the context is the model's).
type evalTextFlags struct {
	textFlags
	label, user string
	fraction    float64
}

func (e *evalTextFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.tokenizer, "tokenizer", "bytes", "-data text: bytes or a directory with GPT-2's vocab.json and merges.txt or tokenizer.json (the model's own)")
	fs.StringVar(&e.format, "text-format", "auto", "-data text: plain, lines, jsonl, fortune or auto (as for train run)")
	fs.StringVar(&e.field, "text-field", "text", "-data text, JSON lines: the field holding the text")
	fs.StringVar(&e.label, "label", "", "-data text, a classifier: the field holding the class")
	fs.StringVar(&e.labels, "labels", "", "-data text, a classifier: comma-separated class names in class order (default: the documents' labels, sorted, as train run)")
	fs.StringVar(&e.user, "user", "", "-data text with -test-fraction: the users' field, as for train run (whole users are held out)")
	fs.Float64Var(&e.fraction, "test-fraction", 0, "-data text: evaluate only the documents train run holds out with this -test-fraction (0: every document)")
}

// evalText evaluates a model over token ids on every document of path:
// next-token loss (mean per token), perplexity and next-token accuracy,
// or a classifier's loss and accuracy.
func evalText(ctx context.Context, tr *models.Trained, modelFile, path string, e *evalTextFlags) (evalResult, string, error) {
	m, ok, err := sequenceModelOf(tr)
	if err != nil {
		return evalResult{}, "", fmt.Errorf("model %s: %w", modelFile, err)
	}
	if !ok {
		return evalResult{}, "", usagef("-data text: model %s is not a model over token ids", modelFile)
	}
	if path == "" {
		return evalResult{}, "", usagef("-data text needs -dir FILE or DIR")
	}
	format, err := data.ParseTextFormat(e.format)
	if err != nil {
		return evalResult{}, "", usagef("-text-format %q: want auto, plain, lines, jsonl or fortune", e.format)
	}
	if (e.label != "") != (m.Classes() > 0) {
		return evalResult{}, "", usagef("-label FIELD is for a classifier, and a classifier needs it; model %s has %d classes", modelFile, m.Classes())
	}
	tok, err := loadTokenizer(e.tokenizer)
	if err != nil {
		return evalResult{}, "", err
	}
	// The same options as train run's (users too), so that -test-fraction
	// holds out the same documents.
	docs, err := data.LoadText(path, data.TextReadOptions{Format: format, TextField: e.field, UserField: e.user, LabelField: e.label})
	if err != nil {
		return evalResult{}, "", asInputError(fmt.Errorf("-dir: %w", err))
	}
	if e.fraction != 0 {
		if !(e.fraction > 0 && e.fraction < 1) {
			return evalResult{}, "", usagef("-test-fraction %v: want a fraction in (0, 1)", e.fraction)
		}
		if _, docs, err = data.SplitText(docs, e.fraction, textSeed); err != nil {
			return evalResult{}, "", usagef("-test-fraction %g: %v", e.fraction, err)
		}
	}
	opts := data.TextDataOptions{Task: data.NextToken, Context: m.Context()}
	if e.label != "" {
		opts.Task, opts.Labels = data.Classify, data.TextLabels(docs)
		if e.labels != "" {
			opts.Labels = splitList(e.labels)
		}
		if len(opts.Labels) != m.Classes() {
			return evalResult{}, "", usagef("%d labels, the model has %d classes (give them in order with -labels)", len(opts.Labels), m.Classes())
		}
	}
	d, err := data.NewTextDataset(docs, tok, opts)
	if err != nil {
		return evalResult{}, "", asInputError(fmt.Errorf("-dir %s: %w", path, err))
	}
	if d.Classes > m.Vocab() && e.label == "" {
		return evalResult{}, "", usagef("-tokenizer has %d ids, the model %d", d.Classes, m.Vocab())
	}
	res, err := evalSequences(ctx, m, d)
	return res, fmt.Sprintf("text %s (%d documents)", path, len(docs)), err
}

// evalSequences is seqtrain.Evaluate on the examples of d, as eval
// reports it.
func evalSequences(ctx context.Context, m sequenceModel, d *data.Dataset) (evalResult, error) {
	if c := m.Context(); d.Shape.C != c || d.Shape.H != 1 || d.Shape.W != 1 {
		return evalResult{}, usagef("the model takes %d token positions, the data %v", c, d.Shape)
	}
	r, err := seqtrain.Evaluate(ctx, m, d.X, d.Y)
	if err != nil {
		return evalResult{}, err
	}
	res := evalResult{Examples: r.Examples, Loss: r.Loss, Accuracy: r.Accuracy, Tokens: r.Tokens}
	if !math.IsInf(r.Perplexity, 1) {
		res.Perplexity = r.Perplexity
	}
	return res, nil
}
