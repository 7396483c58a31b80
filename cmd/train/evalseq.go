package main

import (
	"context"
	"flag"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/text"
)

// evalTextFlags are the flags of "train eval -data text": how to read and
// tokenize the documents (the context is the model's).
type evalTextFlags struct {
	textFlags
	label string
}

func (e *evalTextFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.tokenizer, "tokenizer", "bytes", "-data text: bytes or a directory with GPT-2's vocab.json and merges.txt or tokenizer.json (the model's own)")
	fs.StringVar(&e.format, "text-format", "auto", "-data text: plain, jsonl, fortune or auto (as for train run)")
	fs.StringVar(&e.field, "text-field", "text", "-data text, JSON lines: the field holding the text")
	fs.StringVar(&e.label, "label", "", "-data text, a classifier: the field holding the class")
	fs.StringVar(&e.labels, "labels", "", "-data text, a classifier: comma-separated class names in class order (default: the documents' labels, sorted, as train run)")
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
		return evalResult{}, "", usagef("-text-format %q: want auto, plain, jsonl or fortune", e.format)
	}
	if (e.label != "") != (m.Classes() > 0) {
		return evalResult{}, "", usagef("-label FIELD is for a classifier, and a classifier needs it; model %s has %d classes", modelFile, m.Classes())
	}
	tok, err := loadTokenizer(e.tokenizer)
	if err != nil {
		return evalResult{}, "", err
	}
	docs, err := data.LoadText(path, data.TextReadOptions{Format: format, TextField: e.field, LabelField: e.label})
	if err != nil {
		return evalResult{}, "", asInputError(fmt.Errorf("-dir: %w", err))
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

// evalSequences is the loss and accuracy of m on d: for a next-token
// model the mean negative log-likelihood per predicted token (every
// position with a real token after it), its perplexity and how often the
// most likely token is the next one; for a classifier per example.
func evalSequences(ctx context.Context, m sequenceModel, d *data.Dataset) (evalResult, error) {
	c, v, k := m.Context(), m.Vocab(), m.Classes()
	if d.Shape.C != c || d.Shape.H != 1 || d.Shape.W != 1 {
		return evalResult{}, usagef("the model takes %d token positions, the data %v", c, d.Shape)
	}
	per := k
	if k == 0 {
		per = c * v
	}
	batch := max(1, min(evalBatch, maxSequenceOutputs/per))
	out := make([]float32, batch*per)
	targets := make([]int, c)
	var nll text.NLL
	correct, counted := 0, 0
	for i0 := 0; i0 < d.Len(); i0 += batch {
		if err := ctx.Err(); err != nil {
			return evalResult{}, err
		}
		n := min(batch, d.Len()-i0)
		x := d.X[i0*c : (i0+n)*c]
		o := out[:n*per]
		if err := m.Forward(x, o); err != nil {
			return evalResult{}, fmt.Errorf("eval: %w", err)
		}
		for i := range n {
			row := o[i*per : (i+1)*per]
			ex := x[i*c : (i+1)*c]
			if k > 0 {
				targets = targets[:1]
				targets[0] = d.Y[i0+i]
			} else {
				targets = targets[:c]
				for t := range c {
					targets[t] = -1
					if t+1 < c && ex[t] != data.TextPad && ex[t+1] != data.TextPad {
						targets[t] = int(ex[t+1])
					}
				}
			}
			if err := nll.AddLogits(row, len(row)/len(targets), targets); err != nil {
				return evalResult{}, fmt.Errorf("eval: example %d: %w", i0+i, err)
			}
			w := len(row) / len(targets)
			for t, y := range targets {
				if y < 0 {
					continue
				}
				counted++
				r := row[t*w : (t+1)*w]
				best := 0
				for j, l := range r {
					if l > r[best] {
						best = j
					}
				}
				if best == y {
					correct++
				}
			}
		}
	}
	res := evalResult{Examples: d.Len(), Loss: nll.Loss()}
	if counted > 0 {
		res.Accuracy = float64(correct) / float64(counted)
	}
	if k == 0 {
		res.Tokens = nll.Tokens
		res.Perplexity = nll.Perplexity()
		if math.IsInf(res.Perplexity, 1) {
			res.Perplexity = math.MaxFloat64
		}
	}
	return res, nil
}
