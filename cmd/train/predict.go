package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/train"
)

// predictBatch is the number of inputs predicted at once.
const predictBatch = 256

// runPredict reads inputs, one example per line, and writes each one's
// class and class probabilities in the same order.
//
// Formats (-format):
//
//	json: input lines are JSON arrays of C*H*W numbers (CHW order, scaled
//	      as the training data); output lines are
//	      {"class":K,"probabilities":[p0,...]}.
//	csv:  input rows are C*H*W numbers; output is a header
//	      "class,p0,...,pK-1" and one row per input. For a model trained
//	      on a CSV table the input is a CSV table with a header naming
//	      the model's columns (categories as values, the label column
//	      optional and skipped), and the output "class,label,p0,...".
//
// For a model over token ids (a next-token model or a sequence
// classifier), input lines are {"tokens": [ids...]} or {"text": "..."}
// (with -tokenizer) and the output is predictSequences'.
//
// Empty input lines are skipped.
func runPredict(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("predict", stderr)
	modelFile := fs.String("model-file", "", "model file written by train run -save-model (required)")
	input := fs.String("input", "-", "input file (- for standard input)")
	format := fs.String("format", "json", "json (input: a JSON array of features per line) or csv (input: a row of features per line; for a model trained on -data csv, a table with a header naming its columns)")
	top := fs.Int("top", 0, "models over token ids: print the K most likely next tokens instead of every id's log-probability (0: every id)")
	tokSpec := fs.String("tokenizer", "", "models over token ids: the tokenizer of {\"text\": ...} inputs and of the tokens -top prints: a directory with GPT-2's vocab.json and merges.txt or tokenizer.json, or bytes")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "json" && *format != "csv" {
		return usagef("-format %q: want json or csv", *format)
	}
	if *input != "-" {
		if st, err := os.Stat(*input); err == nil && st.IsDir() {
			return usagef("-input %s is a directory, want a file (- for standard input)", *input)
		}
	}
	tr, err := loadModelFile(*modelFile)
	if err != nil {
		return err
	}
	sm, isSeq, err := sequenceModelOf(tr)
	if err != nil {
		return fmt.Errorf("model %s: %w", *modelFile, err)
	}
	if !isSeq && (*top != 0 || *tokSpec != "") {
		return usagef("-top and -tokenizer apply to models over token ids; %s is not one", *modelFile)
	}
	if isSeq && *format != "json" {
		return usagef("-format %s: a model over token ids reads JSON lines", *format)
	}
	in := stdin
	if *input != "-" {
		f, err := os.Open(*input)
		if err != nil {
			return usagef("-input: %v", err)
		}
		defer f.Close()
		in = f
	}
	if isSeq {
		tok, err := loadTokenizer(*tokSpec)
		if err != nil {
			return err
		}
		return predictSequences(ctx, sm, tok, *top, in, "input "+*input, stdout)
	}
	if *format == "csv" && tr.Metadata.Columns != nil {
		return predictTable(tr, in, "input "+*input, stdout, stderr)
	}
	a := tr.Architecture
	features := train.Features(tr.Metadata.Features)
	in3, err := train.InputShape(features, a.Input)
	if err != nil {
		return fmt.Errorf("model %s: %w", *modelFile, err)
	}
	p := &predictor{ctx: ctx, tr: tr, features: features, shape: in3, per: in3[0] * in3[1] * in3[2], k: a.Classes,
		csv: *format == "csv", out: bufio.NewWriter(stdout)}
	if _, c, ok := models.TransformerOf(tr.Model); ok && c.Classes == 0 {
		p.k = c.Vocab // a language model predicts the next token
	} else if ok {
		p.k = c.Classes
	}
	if p.csv {
		hdr := []string{"class"}
		for j := range p.k {
			hdr = append(hdr, fmt.Sprintf("p%d", j))
		}
		fmt.Fprintln(p.out, strings.Join(hdr, ","))
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), max(1<<20, 64*p.per))
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if line == 1 {
			text = strings.TrimPrefix(text, "\ufeff") // Excel's byte-order mark
		}
		if text == "" {
			continue
		}
		if err := p.parse(text); err != nil {
			return usagef("predict: input line %d: %v", line, err)
		}
		if len(p.x) == predictBatch*p.per {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := p.flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return usagef("predict: input line %d is too long for %d features", line+1, p.per)
		}
		return fmt.Errorf("predict: reading input: %w", err)
	}
	if err := p.flush(); err != nil {
		return err
	}
	return p.out.Flush()
}

// predictor collects parsed inputs and writes their predictions.
type predictor struct {
	ctx      context.Context
	tr       *models.Trained
	features train.Features // applied to each input, as the run did
	shape    [3]int         // of one input
	per, k   int
	csv      bool
	x        []float32
	row      []float32
	out      *bufio.Writer
}

func (p *predictor) parse(text string) error {
	p.row = p.row[:0]
	if p.csv {
		rec, err := csv.NewReader(strings.NewReader(text)).Read()
		if err != nil {
			return err
		}
		for i, f := range rec {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 32)
			if err != nil {
				return fmt.Errorf("feature %d: %q is not a number", i, f)
			}
			p.row = append(p.row, float32(v))
		}
	} else {
		var vals []float64
		if err := json.Unmarshal([]byte(text), &vals); err != nil {
			return fmt.Errorf("want a JSON array of numbers: %v", err)
		}
		for _, v := range vals {
			p.row = append(p.row, float32(v))
		}
	}
	if len(p.row) != p.per {
		s := p.shape
		return fmt.Errorf("%d features, the model takes %d (%dx%dx%d, CHW order)", len(p.row), p.per, s[0], s[1], s[2])
	}
	for i, v := range p.row {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("feature %d is %v (out of float32 range or not a number)", i, v)
		}
	}
	p.x = append(p.x, p.row...)
	return nil
}

func (p *predictor) flush() error {
	if len(p.x) == 0 {
		return nil
	}
	x, err := p.featuresOf(p.x)
	if err != nil {
		return err
	}
	classes, probs, err := p.tr.Predict(x)
	if err != nil {
		return err
	}
	p.x = p.x[:0]
	var b []byte
	for i, c := range classes {
		b = b[:0]
		if p.csv {
			b = strconv.AppendInt(b, int64(c), 10)
			for _, v := range probs[i*p.k : (i+1)*p.k] {
				b = append(b, ',')
				b = strconv.AppendFloat(b, float64(v), 'g', -1, 32)
			}
		} else {
			b = append(b, `{"class":`...)
			b = strconv.AppendInt(b, int64(c), 10)
			b = append(b, `,"probabilities":[`...)
			for j, v := range probs[i*p.k : (i+1)*p.k] {
				if j > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, float64(v), 'g', -1, 32)
			}
			b = append(b, "]}"...)
		}
		b = append(b, '\n')
		if _, err := p.out.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// featuresOf returns the model's features of the inputs x (x itself for a
// model trained on the inputs as they are).
func (p *predictor) featuresOf(x []float32) ([]float32, error) {
	if p.features == train.FeaturesPixels {
		return x, nil
	}
	n := len(x) / p.per
	d, err := data.NewDataset(x, make([]int, n), data.Shape{C: p.shape[0], H: p.shape[1], W: p.shape[2]}, p.k)
	if err != nil {
		return nil, err
	}
	f, err := train.ApplyFeatures(p.ctx, p.features, d)
	if err != nil {
		return nil, err
	}
	return f.X, nil
}
