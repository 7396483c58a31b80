package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/data"
)

// textFlags are the flags of "train run -data text": the tokenizer, the
// context length, and how the files hold documents. The label and user
// fields and the held-out split are csvFlags' -label, -user, -test-file
// and -test-fraction, which mean the same for JSON lines.
type textFlags struct {
	tokenizer, format, field, labels string
	context                          int
}

// textOnly are the flags only -data text reads.
var textOnly = []string{"tokenizer", "context", "text-format", "text-field", "labels"}

func (t *textFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.tokenizer, "tokenizer", "bytes", "-data text: bytes (a byte-level vocabulary of 257 ids, for models trained from scratch) or a directory with GPT-2's vocab.json and merges.txt or tokenizer.json")
	fs.IntVar(&t.context, "context", 128, "-data text: token positions per example; next-token examples are cut from the packed documents overlapping by one token")
	fs.StringVar(&t.format, "text-format", "auto", "-data text: plain (a file is one document), lines (a line is one), jsonl (one JSON object per line), fortune (fortune cookies separated by % lines, users by attribution) or auto (jsonl for .jsonl/.json, else plain)")
	fs.StringVar(&t.field, "text-field", "text", "-data text, JSON lines: the field holding the text")
	fs.StringVar(&t.labels, "labels", "", "-data text with -label: comma-separated class names in class order (default: the training documents' labels, sorted, which the privacy claim does not cover)")
}

// validate refuses the text flags without -data text, and checks them with
// it.
func (t *textFlags) validate(fs *flag.FlagSet, dataset, dir, model string, c *csvFlags) error {
	if dataset != "text" {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains(textOnly, f.Name) {
				given = append(given, "-"+f.Name)
			}
		})
		if len(given) > 0 {
			return usagef("%s only apply to -data text", strings.Join(given, ", "))
		}
		return nil
	}
	if dir == "" {
		return usagef("-data text needs -dir FILE or DIR (plain text, JSON lines or fortune files)")
	}
	if t.context < 2 || t.context > 1<<16 {
		return usagef("-context %d: want 2 to %d token positions", t.context, 1<<16)
	}
	if _, err := data.ParseTextFormat(t.format); err != nil {
		return usagef("-text-format %q: want auto, plain, lines, jsonl or fortune", t.format)
	}
	if t.labels != "" && c.label == "" {
		return usagef("-labels names the classes of -label FIELD; give -label too")
	}
	if slices.Contains(featureModels, model) {
		return usagef("-model %s reads features, not token ids: -data text needs a sequence model", model)
	}
	return nil
}

// featureModels are the models that read an example as numeric features;
// on token ids they would train without error and mean nothing.
var featureModels = []string{"logistic", "mlp", "cnn", "wrn16-4", "tabular", "scatternet"}

// textSeed fixes the held-out split of -data text: the same files give
// the same split on every run.
const textSeed = 0x7e47

// load reads the documents of path and the held-out ones (-test-file, or
// -test-fraction of them, whole users at a time when they have users) and
// tokenizes both into data sets.
func (t *textFlags) load(path string, c *csvFlags) (trainSet, testSet *data.Dataset, source string, err error) {
	format, _ := data.ParseTextFormat(t.format)
	tok, err := loadTokenizer(t.tokenizer)
	if err != nil {
		return nil, nil, "", err
	}
	ropts := data.TextReadOptions{Format: format, TextField: t.field, UserField: c.user, LabelField: c.label}
	docs, err := data.LoadText(path, ropts)
	if err != nil {
		return nil, nil, "", fmt.Errorf("-dir: %w", err)
	}
	var test []data.TextDocument
	held := ""
	switch {
	case c.testFile != "":
		if test, err = data.LoadText(c.testFile, ropts); err != nil {
			return nil, nil, "", fmt.Errorf("-test-file: %w", err)
		}
		held = ", held out: " + c.testFile
	case c.testFraction > 0:
		if docs, test, err = data.SplitText(docs, c.testFraction, textSeed); err != nil {
			return nil, nil, "", usagef("-test-fraction %g: %v", c.testFraction, err)
		}
		held = fmt.Sprintf(", %d documents held out (-test-fraction %g)", len(test), c.testFraction)
	}
	opts := data.TextDataOptions{Task: data.NextToken, Context: t.context, UserLevel: c.user != "" || format == data.TextFortune}
	task := "next-token prediction"
	if c.label != "" {
		opts.Task = data.Classify
		if t.labels != "" {
			opts.Labels = splitList(t.labels)
		} else {
			opts.Labels = data.TextLabels(docs)
		}
		task = fmt.Sprintf("classification into %d classes by %q", len(opts.Labels), c.label)
	}
	if trainSet, err = data.NewTextDataset(docs, tok, opts); err != nil {
		return nil, nil, "", fmt.Errorf("-dir %s: %w", path, err)
	}
	trainSet.Name = "text " + path
	if test != nil {
		if testSet, err = data.NewTextDataset(test, tok, opts); err != nil {
			return nil, nil, "", fmt.Errorf("held-out documents: %w", err)
		}
		testSet.Name = trainSet.Name + " (held out)"
	}
	users := ""
	if trainSet.Owners != nil {
		if u, err := trainSet.Users(); err == nil {
			users = fmt.Sprintf(", %d users", u.Len())
		}
	}
	source = fmt.Sprintf("text %s (%d documents%s, %s tokenizer of %d ids, %s, context %d)%s",
		path, len(docs), users, tokenizerName(t.tokenizer), tok.VocabSize(), task, t.context, held)
	return trainSet, testSet, source, nil
}

func tokenizerName(spec string) string {
	if spec == "bytes" {
		return "byte"
	}
	return "BPE " + spec
}
