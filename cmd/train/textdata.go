package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/seqtrain"
	"github.com/dpmf-go/dpmf/train"
)

// textFlags are the flags of "train run -data text": the tokenizer, the
// context length, and how the files hold documents. The label and user
// fields and the held-out split are csvFlags' -label, -user, -test-file
// and -test-fraction, which mean the same for JSON lines.
type textFlags struct {
	tokenizer, format, field, labels string
	context                          int
	initModel                        string
	dim, heads, blocks               int

	contextGiven bool
	vocab        int             // the tokenizer's, once load has read it
	init         *models.Trained // the -init-model file, once load has read it
}

// textOnly are the flags only -data text reads.
var textOnly = []string{"tokenizer", "context", "text-format", "text-field", "labels", "init-model", "gpt-dim", "gpt-heads", "gpt-blocks"}

func (t *textFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.tokenizer, "tokenizer", "bytes", "-data text: bytes (a byte-level vocabulary of 257 ids, for models trained from scratch) or a directory with GPT-2's vocab.json and merges.txt or tokenizer.json")
	fs.IntVar(&t.context, "context", 128, "-data text: token positions per example; next-token examples are cut from the packed documents overlapping by one token")
	fs.StringVar(&t.format, "text-format", "auto", "-data text: plain (a file is one document), lines (a line is one), jsonl (one JSON object per line), fortune (fortune cookies separated by % lines, users by attribution) or auto (jsonl for .jsonl/.json, else plain)")
	fs.StringVar(&t.field, "text-field", "text", "-data text, JSON lines: the field holding the text")
	fs.StringVar(&t.labels, "labels", "", "-data text with -label: comma-separated class names in class order (default: the training documents' labels, sorted, which the privacy claim does not cover)")
	fs.StringVar(&t.initModel, "init-model", "", "-data text: start from this model file (a transformer written by train import or train run -save-model, LoRA adapters and all) instead of -model gpt; its context is the default -context")
	fs.IntVar(&t.dim, "gpt-dim", 128, "-data text, -model gpt: the width of the GPT-2-shaped model trained from scratch")
	fs.IntVar(&t.heads, "gpt-heads", 4, "-data text, -model gpt: attention heads")
	fs.IntVar(&t.blocks, "gpt-blocks", 2, "-data text, -model gpt: transformer blocks")
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
	fs.Visit(func(f *flag.Flag) { t.contextGiven = t.contextGiven || f.Name == "context" })
	if _, err := data.ParseTextFormat(t.format); err != nil {
		return usagef("-text-format %q: want auto, plain, lines, jsonl or fortune", t.format)
	}
	if t.labels != "" && c.label == "" {
		return usagef("-labels names the classes of -label FIELD; give -label too")
	}
	if slices.Contains(featureModels, model) {
		return usagef("-model %s reads features, not token ids: -data text needs -model gpt or -init-model FILE", model)
	}
	if t.initModel == "" && model != "gpt" {
		return usagef("-model %q: -data text trains -model gpt (a GPT-2-shaped transformer, -gpt-dim, -gpt-heads, -gpt-blocks) or -init-model FILE", model)
	}
	if t.initModel != "" {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains([]string{"model", "gpt-dim", "gpt-heads", "gpt-blocks"}, f.Name) {
				given = append(given, "-"+f.Name)
			}
		})
		if len(given) > 0 {
			return usagef("-init-model %s is the model: %s would be ignored", t.initModel, strings.Join(given, ", "))
		}
	}
	for _, v := range []struct {
		name string
		v    int
	}{{"gpt-dim", t.dim}, {"gpt-heads", t.heads}, {"gpt-blocks", t.blocks}} {
		if v.v < 1 || v.v > 1<<14 {
			return usagef("-%s %d: want 1 to %d", v.name, v.v, 1<<14)
		}
	}
	if t.dim%t.heads != 0 {
		return usagef("-gpt-dim %d is not a multiple of -gpt-heads %d", t.dim, t.heads)
	}
	return nil
}

// featureModels are the models that read an example as numeric features;
// on token ids they would train without error and mean nothing.
var featureModels = []string{"logistic", "mlp", "cnn", "cnn-small", "wrn16-4", "tabular", "scatternet"}

// textSeed fixes the held-out split of -data text: the same files give
// the same split on every run.
const textSeed = 0x7e47

// load reads the documents of path and the held-out ones (-test-file, or
// -test-fraction of them, whole users at a time when they have users) and
// tokenizes both into data sets.
func (t *textFlags) load(path string, c *csvFlags) (trainSet, testSet *data.Dataset, source string, err error) {
	format, _ := data.ParseTextFormat(t.format)
	if t.initModel != "" {
		if t.init, err = models.ReadFile(t.initModel); err != nil {
			return nil, nil, "", usagef("-init-model: %v", err)
		}
		if _, c, ok := models.TransformerOf(t.init.Model); ok && !t.contextGiven {
			t.context = c.Context
		}
	}
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
	t.vocab = tok.VocabSize()
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

// model returns the run's model over token ids: the -init-model file's,
// whose context the data must have, or a GPT-2-shaped transformer
// trained from scratch (-gpt-dim, -gpt-heads, -gpt-blocks) for the
// tokenizer's vocabulary, the data's context and, for classification,
// its classes.
func (t *textFlags) model(trainSet *data.Dataset, classify bool) (models.Model, error) {
	if t.init != nil {
		tr := t.init
		_, c, ok := models.TransformerOf(tr.Model)
		switch {
		case !ok:
			return nil, usagef("-init-model %s is not a transformer (it is %s)", t.initModel, tr.Model.Name())
		case c.Context != trainSet.Shape.C:
			return nil, usagef("-init-model %s takes %d token positions: give -context %d", t.initModel, c.Context, c.Context)
		case c.Vocab < t.vocab:
			return nil, usagef("-init-model %s has %d token ids, the tokenizer %d", t.initModel, c.Vocab, t.vocab)
		case classify != (c.Classes > 0) || classify && c.Classes != trainSet.Classes:
			return nil, usagef("-init-model %s has %d classes, the data %d (0: next-token prediction)", t.initModel, c.Classes, map[bool]int{true: trainSet.Classes}[classify])
		}
		return tr.Model, nil
	}
	c := models.TransformerConfig{Vocab: t.vocab, Context: trainSet.Shape.C, Dim: t.dim, Heads: t.heads, Blocks: t.blocks, Causal: true}
	if classify {
		c.Classes = trainSet.Classes
	}
	m, err := models.NewTransformer("gpt", c, 1)
	if err != nil {
		return nil, usagef("-model gpt: %v", err)
	}
	return m, nil
}

// backend sets the run's model (textFlags.model) and its training backend
// (seqtrain), replacing settings' placeholder.
func (t *textFlags) backend(cfg *train.Config, classify bool) error {
	m, err := t.model(cfg.Data.Train, classify)
	if err != nil {
		return err
	}
	b, err := seqtrain.NewBackend(m)
	if err != nil {
		return err
	}
	cfg.Model.Built, cfg.Model.Backend, cfg.Model.Name = m, b, m.Name()
	return nil
}

// textModelPending stands for the model of -data text in the settings
// checked before the data are read; it is replaced by textFlags.backend.
type textModelPending struct{}

var errTextModelPending = errors.New("the model of -data text is built once the data are read")

func (textModelPending) Name() string       { return "gpt" }
func (textModelPending) InputShape() [3]int { return [3]int{} }
func (textModelPending) NewEngine(clip.Options) (train.Engine, error) {
	return nil, errTextModelPending
}
func (textModelPending) Save(io.Writer) error { return errTextModelPending }
func (textModelPending) Load(io.Reader) error { return errTextModelPending }

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
