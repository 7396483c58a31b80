package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/seqtrain"
	"github.com/dpmf-go/dpmf/text"
	"github.com/dpmf-go/dpmf/train"
)

// runFlags are the flags of "train run" (and the defaults of plain "train").
type runFlags struct {
	dataset, dir, model, hidden, mechanism, workload, sampling, accountant string
	steps, batch, bands, evalEvery, ckptEvery                              int
	eps, delta, sigma, clip, lr, cooldown                                  float64
	momentum                                                               optionalFloat
	seed, ckpt, metrics, cache, config, jsonOut, optimizer                 string
	nonPrivate                                                             bool
	insecureSeed                                                           bool
	trainLimit, embeddingDim, warmup, groups                               int
	features                                                               string
	ema                                                                    float64
	validation                                                             int
	users                                                                  userFlags
	accuracy                                                               accuracyFlags
}

func (r *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.config, "config", "", "JSON file with flag values (keys are flag names); explicit flags override it")
	fs.StringVar(&r.dataset, "data", "fashion-mnist", "fashion-mnist, mnist, cifar10, cifar100, embedded (the Fashion-MNIST subset shipped in the binary), synthetic-cifar (CIFAR-shaped synthetic data for benchmarks), npy (-dir holding NumPy x_train.npy, y_train.npy, x_test.npy, y_test.npy: examples (N, D), (N, H, W) or (N, H, W, C), integer labels), images (-dir holding train/CLASS/*.png|jpg and test/CLASS/*, one size, as torchvision's ImageFolder) or csv (a table with a header row, train run and eval only) or text (-dir: plain text, JSON lines or fortune files, tokenized by -tokenizer; train run only)")
	fs.StringVar(&r.dir, "dir", "", "dataset directory, or the CSV file for -data csv (default for fashion-mnist: Debian's /usr/share/datasets/fashion-mnist, or the embedded subset if it is not installed)")
	fs.IntVar(&r.trainLimit, "train-examples", 0, "use only the first N training examples (0: all)")
	fs.StringVar(&r.model, "model", "mlp", "logistic, mlp, cnn, cnn-small (the end-to-end CNN of Tramèr and Boneh 2021), wrn16-4, tabular (categorical embeddings + MLP, for -data csv) or scatternet (GroupNorm + linear on scattering features, Tramèr and Boneh 2021)")
	fs.StringVar(&r.features, "features", "", "fixed per-example features: scatter (scattering transform J=2 L=8, no privacy cost; the default of -model scatternet) or none")
	fs.Float64Var(&r.ema, "ema", 0, "decay of an exponential moving average of the parameters, evaluated and saved as the model (post-processing; 0: none)")
	fs.IntVar(&r.validation, "validation", 0, "hold out the last N training examples and evaluate on them instead of the test split (for choosing hyperparameters; the test split is not read)")
	fs.StringVar(&r.hidden, "hidden", "128", "comma-separated hidden sizes of the MLP")
	fs.IntVar(&r.embeddingDim, "embedding-dim", 0, "dimension of each categorical column's embedding in the tabular model (default 8)")
	fs.IntVar(&r.groups, "groups", 0, "GroupNorm groups of scatternet (default 27, dividing its 81 channels) and wrn16-4 (default 16)")
	fs.IntVar(&r.steps, "steps", 500, "training steps n")
	fs.IntVar(&r.batch, "batch", 250, "expected batch size B")
	fs.BoolVar(&r.nonPrivate, "non-private", false, "train without privacy (for comparison)")
	fs.StringVar(&r.mechanism, "mechanism", "bandmf:auto", privacy.MechanismNames())
	fs.StringVar(&r.workload, "workload", "optimizer", "factorize the optimizer's own momentum/cooldown workload (optimizer) or prefix sums (prefix)")
	fs.StringVar(&r.sampling, "sampling", "", "poisson, band-poisson, fixed-order, shuffle, random-allocation (dpsgd) or band-allocation (dpsgd, bandmf:B, toeplitz:B) (default: by mechanism)")
	fs.IntVar(&r.bands, "bands", 0, "partitions of band sampling (default: the mechanism's bands)")
	fs.Float64Var(&r.eps, "epsilon", 8, "target epsilon (calibrates the noise multiplier)")
	fs.Float64Var(&r.delta, "delta", 0, "delta (default min(1e-5, 1/examples))")
	fs.Float64Var(&r.sigma, "sigma", 0, "noise multiplier (overrides -epsilon; epsilon is then reported)")
	fs.StringVar(&r.accountant, "accountant", "pld", "pld or rdp")
	fs.Float64Var(&r.clip, "clip", 1, "per-example clip norm zeta")
	fs.Float64Var(&r.lr, "lr", 0, "peak learning rate (default 0.5 for SGD, 0.1 with momentum)")
	fs.StringVar(&r.optimizer, "optimizer", "sgd", "sgd (with -momentum) or adam (default -lr 0.001; it reads the privatized gradients, so the privacy claim is the same)")
	fs.Var(&r.momentum, "momentum", "heavy-ball momentum beta, a `float` in [0, 1) (default 0.95 for matrix mechanisms, 0 for dpsgd and -non-private)")
	fs.Float64Var(&r.cooldown, "cooldown", 0.25, "fraction of steps cooled down linearly to 0.05x")
	fs.IntVar(&r.warmup, "warmup", 0, "steps over which the learning rate rises linearly to -lr at the start (0: none; the cooldown still applies)")
	fs.StringVar(&r.seed, "seed", "", "seed for a reproducible run (default: cryptographically random); recorded in the claim; under 128 bits it needs -insecure-seed")
	fs.BoolVar(&r.insecureSeed, "insecure-seed", false, "accept a low-entropy -seed for a private run: an insecure experiment, recorded as such")
	fs.IntVar(&r.evalEvery, "eval-every", 0, "evaluate every N steps (default steps/5)")
	fs.StringVar(&r.ckpt, "checkpoint", "", "checkpoint file: resumed from if present, written every -checkpoint-every steps and at the end")
	fs.IntVar(&r.ckptEvery, "checkpoint-every", 50, "steps between checkpoints (0: only at the end)")
	fs.StringVar(&r.metrics, "metrics", "", "JSON-lines metrics file")
	fs.StringVar(&r.cache, "cache", defaultCacheDir(), "directory caching optimized factorizations")
	fs.StringVar(&r.jsonOut, "json", "", "write the run's result (plan, ledger, final metrics) as JSON to this file (- for stdout)")
	r.users.register(fs)
	r.accuracy.register(fs)
}

func defaultCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return d + "/dpmf"
}

// applyConfigFile sets every flag named in a JSON object, unless it was
// given on the command line.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return usagef("-config: %v", err)
	}
	if err := applyConfig(fs, b); err != nil {
		return usagef("-config %s: %v", path, err)
	}
	return nil
}

func runDefault(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runTrainWith(ctx, "train", args, stdout, stderr)
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runTrainWith(ctx, "run", args, stdout, stderr)
}

func runTrainWith(ctx context.Context, name string, args []string, stdout, stderr io.Writer) (err error) {
	inv, err := parseRunInvocation(name, args, stderr)
	if err != nil {
		return err
	}
	// With -json - standard output carries only the JSON; the log goes to
	// standard error.
	log := stdout
	if inv.r.jsonOut == "-" {
		log = stderr
	}
	cfg, columns, source, err := inv.config(log, stderr)
	if err != nil {
		return err
	}
	// The data (with the features, a gigabyte for the Fashion-MNIST
	// recipe) live for the whole run; at the default GOGC=100 the heap
	// grows to twice them before a collection (2.35 GiB peak for the
	// recipe, 1.1 GB of features). They hold no pointers, so the
	// collector does not scan them and collecting at 20% growth costs
	// little. A GOGC set by the user is kept.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(20)
	}
	tty := terminal(stderr)
	curves, finishBar := inv.attachProgress(&cfg, stderr, tty)
	// The factorization building lines go to stderr; the cached
	// factorizations to the log, before the plan they feed.
	bp := newBuildProgress(stderr, progressEvery, tty)
	bp.cachedLog = log
	ctx = bp.Attach(ctx)
	testLen, testName := 0, "test"
	if cfg.Data.Test != nil {
		testLen = cfg.Data.Test.Len()
	}
	if inv.r.validation > 0 {
		testName = "validation (held out of training; the test split is not read)"
	}
	fmt.Fprintf(log, "data: %s (%d train, %d %s examples)\n", source, cfg.Data.Train.Len(), testLen, testName)
	if inv.saveModel != "" && cfg.Model.Built == nil {
		if cfg.Model.Built, err = train.NewModel(cfg); err != nil {
			return err
		}
	}
	// The run replaces the examples by their features (train.Config's
	// Features); what follows here needs only the data sets' names and
	// labels, so this function does not keep the loaded examples alive
	// (Fashion-MNIST's pixels are 220 MB).
	runCfg := cfg
	cfg.Data.Train, cfg.Data.Test = withoutExamples(cfg.Data.Train), withoutExamples(cfg.Data.Test)
	res, err := inv.wf.train(ctx, runCfg, inv.fs, log, stderr)
	finishBar()
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "%s accuracy %.4f, %s loss %.4f after %d steps (%.1fs%s)%s\n", res.Final.Split, res.Final.Accuracy, res.Final.Split, res.Final.Loss, res.Steps, res.Elapsed.Seconds(), featuresNote(res.Features), notPrivateNote(res.Final))
	if inv.r.dataset == "text" && inv.csvf.label == "" {
		fmt.Fprintf(log, "%s perplexity %.4g (the loss is per predicted token; accuracy: the next token's)\n", res.Final.Split, math.Exp(res.Final.Loss))
	}
	if res.Plan != nil {
		joint := ""
		if res.Plan.Quantile != nil {
			joint = fmt.Sprintf(" (gradient and clip-norm count jointly; the gradient's own is %.5g, the count's noise std %g)", res.Plan.GradientNoiseMultiplier, res.Plan.Quantile.NoiseStd)
		}
		fmt.Fprintf(log, "privacy: (epsilon %.4g, delta %.3g), %s accounting, mechanism %s, noise multiplier %.5g%s\n",
			res.Plan.Epsilon, res.Plan.Delta, res.Plan.Accountant, res.Plan.Mechanism, res.Plan.NoiseMultiplier, joint)
	} else {
		fmt.Fprintln(log, "privacy: none (non-private run)")
	}
	if saveErr := inv.saveOutputs(log, cfg, res, curves, source, columns); saveErr != nil {
		defer func() { err = errors.Join(err, saveErr) }()
	}
	return inv.writeJSON(stdout, res)
}

// withoutExamples is d without its examples' values (nil for nil).
func withoutExamples(d *data.Dataset) *data.Dataset {
	if d == nil {
		return nil
	}
	// Not a copy of *d: a view's copy would keep its parent's examples.
	return &data.Dataset{Name: d.Name, Y: d.Y, Shape: d.Shape, Classes: d.Classes,
		Coarse: d.Coarse, CoarseClasses: d.CoarseClasses, Owners: d.Owners}
}

// featuresNote says, for the final line, whether the features were
// computed or read from the cache, and in how long ("" without features).
func featuresNote(done []train.FeaturesDone) string {
	var computed, cached float64
	nc, nr := 0, 0
	for _, d := range done {
		if d.Cached {
			cached += d.Seconds
			nr++
		} else {
			computed += d.Seconds
			nc++
		}
	}
	switch {
	case nc > 0 && nr > 0:
		return fmt.Sprintf(", of which features: %.1fs computing, %.1fs reading from the cache", computed, cached)
	case nc > 0:
		return fmt.Sprintf(", of which %.1fs computing the features", computed)
	case nr > 0:
		return fmt.Sprintf("; features read from the cache in %.1fs", cached)
	}
	return ""
}

// runInvocation is a parsed and checked "train run" command line.
type runInvocation struct {
	fs                            *flag.FlagSet
	r                             runFlags
	csvf                          csvFlags
	textf                         textFlags
	wf                            workerFlags
	clipPerLayer, saveModel, plot string
	dirGiven                      bool
}

// parseRunInvocation parses the flags (and -config file) of "train run"
// and checks them and the output paths before any work is done.
func parseRunInvocation(name string, args []string, stderr io.Writer) (*runInvocation, error) {
	inv := &runInvocation{fs: newFlags(name, stderr)}
	fs := inv.fs
	inv.r.register(fs)
	fs.StringVar(&inv.clipPerLayer, "clip-per-layer", "", "comma-separated clip bounds, one per layer with parameters (replaces -clip; the sensitivity is their L2 norm)")
	fs.StringVar(&inv.saveModel, "save-model", "", "write the final model (architecture, parameters, privacy claim) to this file, for train eval and train predict")
	fs.StringVar(&inv.plot, "plot", "", "draw the loss, accuracy and epsilon spent of the run to this .png or .svg file at the end (see also train plot)")
	inv.csvf.register(fs)
	inv.textf.register(fs)
	inv.wf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if inv.r.config != "" {
		if err := applyConfigFile(fs, inv.r.config); err != nil {
			return nil, err
		}
	}
	fs.Visit(func(f *flag.Flag) { inv.dirGiven = inv.dirGiven || f.Name == "dir" })
	if err := inv.r.validate(inv.dirGiven); err != nil {
		return nil, err
	}
	if err := refuseExplicitZero(fs, zeroMeansDefault); err != nil {
		return nil, err
	}
	if inv.saveModel != "" {
		if err := checkOutput("save-model", inv.saveModel); err != nil {
			return nil, err
		}
	}
	if inv.plot != "" {
		if err := checkPlotPath("plot", inv.plot); err != nil {
			return nil, err
		}
	}
	if err := inv.csvf.validate(fs, inv.r.dataset, inv.r.dir, inv.r.model); err != nil {
		return nil, err
	}
	if inv.r.dataset == "text" && !flagGiven(fs, "model") {
		inv.r.model = "gpt"
	}
	if err := inv.textf.validate(fs, inv.r.dataset, inv.r.dir, inv.r.model, &inv.csvf); err != nil {
		return nil, err
	}
	if err := refuseSharedPaths(inv.paths()...); err != nil {
		return nil, err
	}
	if err := inv.wf.check(fs); err != nil {
		return nil, err
	}
	if err := checkCacheDir(inv.r.cache); err != nil {
		return nil, err
	}
	// The settings that are wrong whatever the data are refused before
	// it is loaded, with the library's own messages.
	cfg, err := inv.r.settings()
	if err != nil {
		return nil, err
	}
	if cfg.Model.ClipPerLayer, err = inv.clipNorms(); err != nil {
		return nil, err
	}
	if err := cfg.CheckSettings(); err != nil {
		return nil, err
	}
	if inv.r.nonPrivate {
		var given []string
		fs.Visit(func(f *flag.Flag) {
			if privacyOnly[f.Name] {
				given = append(given, "-"+f.Name)
			}
		})
		if len(given) > 0 {
			return nil, usagef("-non-private trains without privacy: %s would be ignored", strings.Join(given, ", "))
		}
	}
	return inv, nil
}

// privacyOnly are the flags a -non-private run has no use for.
var privacyOnly = map[string]bool{"epsilon": true, "delta": true, "sigma": true, "accountant": true}

// paths are the files the run reads (-config, the CSV files) and writes.
func (inv *runInvocation) paths() []namedPath {
	r := &inv.r
	ps := []namedPath{{"config", r.config, false}}
	if r.dataset == "csv" || r.dataset == "text" {
		ps = append(ps, namedPath{"dir", r.dir, false}, namedPath{"test-file", inv.csvf.testFile, false})
	}
	return append(ps,
		namedPath{"checkpoint", r.ckpt, true}, namedPath{"metrics", r.metrics, true},
		namedPath{"json", r.jsonOut, true}, namedPath{"save-model", inv.saveModel, true},
		namedPath{"plot", inv.plot, true})
}

// config loads the data and makes the run's train.Config, with the
// columns of a CSV table and where the data came from.
func (inv *runInvocation) config(log, stderr io.Writer) (cfg train.Config, columns *models.Columns, source string, err error) {
	r := &inv.r
	var (
		trainSet, testSet *data.Dataset
		table             *data.Tabular
	)
	switch r.dataset {
	case "csv":
		trainSet, testSet, table, source, err = inv.csvf.load(r.dir)
	case "text":
		trainSet, testSet, source, err = inv.textf.load(r.dir, &inv.csvf)
		err = asInputError(err)
	default:
		trainSet, testSet, source, err = loadData(r.dataset, r.dir, !inv.dirGiven)
	}
	if err != nil {
		return cfg, nil, "", err
	}
	if cfg, err = r.trainConfig(trainSet, testSet); err != nil {
		return cfg, nil, "", err
	}
	if r.dataset == "text" {
		if err = inv.textf.backend(&cfg, inv.csvf.label != ""); err != nil {
			return cfg, nil, "", err
		}
	}
	if table != nil {
		cfg.Model.Categorical = table.Cardinalities()
		columns = columnsOf(table, inv.csvf.label)
	}
	if cfg.Model.ClipPerLayer, err = inv.clipNorms(); err != nil {
		return cfg, nil, "", err
	}
	cfg.Output.CheckpointPath, cfg.Output.CheckpointEvery, cfg.Output.Log = r.ckpt, r.ckptEvery, log
	return cfg, columns, source, nil
}

// clipNorms is -clip-per-layer, which excludes -clip.
func (inv *runInvocation) clipNorms() ([]float64, error) {
	if inv.clipPerLayer == "" {
		return nil, nil
	}
	clipSet := false
	inv.fs.Visit(func(f *flag.Flag) { clipSet = clipSet || f.Name == "clip" })
	if clipSet {
		return nil, usagef("-clip and -clip-per-layer exclude each other")
	}
	var out []float64
	for _, f := range strings.Split(inv.clipPerLayer, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, usagef("-clip-per-layer %q: want positive numbers", inv.clipPerLayer)
		}
		out = append(out, v)
	}
	return out, nil
}

// attachProgress reports the run's progress on stderr, terminal or not:
// the factorization building lines, and one line per evaluation; standard
// output keeps the results; on a terminal a progress bar too. It returns
// the curves it records for -plot, and what finishes the bar.
func (inv *runInvocation) attachProgress(cfg *train.Config, stderr, tty io.Writer) (*runCurves, func()) {
	curves := &runCurves{}
	cfg.Output.OnFeatures = newFeaturesProgress(stderr, progressEvery).report
	evalLines := newEvalProgress(stderr, cfg.Privacy.Steps, tty != nil)
	cfg.Output.OnStep = func(sm train.StepMetrics) {
		curves.addStep(sm)
		evalLines.step(sm)
	}
	cfg.Output.OnEval = func(em train.EvalMetrics) {
		curves.addEval(em)
		evalLines.eval(em)
	}
	return curves, attachTrainingBar(cfg, tty)
}

// saveOutputs writes -save-model and -plot after the run; their errors
// are joined to the run's, after the JSON is written.
func (inv *runInvocation) saveOutputs(log io.Writer, cfg train.Config, res *train.Result, curves *runCurves, source string, columns *models.Columns) error {
	var saveErr error
	if sb, ok := cfg.Model.Backend.(*seqtrain.Backend); ok {
		cfg.Model.Built = sb.Model() // with the parameters the loop last wrote
	}
	if inv.saveModel != "" {
		saveErr = saveModelOrFallback(inv.saveModel, inv.r.ckpt, func(path string) error {
			return saveModel(path, cfg, res, inv.r.seed != "", columns)
		})
		if saveErr == nil {
			fmt.Fprintf(log, "model: %s\n", inv.saveModel)
		}
		if saveErr == nil && columns != nil && res.Plan != nil {
			fmt.Fprintf(log, "note: %s\n", vocabularyNote)
		}
	}
	if inv.plot != "" {
		c := curves
		if inv.r.metrics != "" {
			// The metrics file also holds the steps before a resume.
			if fc, err := readCurves(inv.r.metrics); err == nil {
				c = fc
			}
		}
		if err := writeRunPlot(inv.plot, fmt.Sprintf("%s, %s", cfg.Model.Name, source), c); err != nil {
			saveErr = errors.Join(saveErr, err)
		} else {
			fmt.Fprintf(log, "plot: %s\n", inv.plot)
		}
	}
	return saveErr
}

// writeJSON writes the result to -json (standard output for -).
func (inv *runInvocation) writeJSON(stdout io.Writer, res *train.Result) error {
	if inv.r.jsonOut == "" {
		return nil
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if inv.r.jsonOut == "-" {
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	// The result holds the run's ledger: if its path fails at the end,
	// it goes where the model would.
	return saveOrFallback("json", "result", inv.r.jsonOut, inv.r.ckpt, func(path string) error {
		if err := atomicfile.WriteFile(path, append(b, '\n')); err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "atomicfile: "))
		}
		return nil
	})
}

// splits are the training and evaluation sets of -validation (the last
// examples of the training split held out, the test split unread) and
// -train-examples (the first examples of the training split). They are
// views of the training split (data.Dataset.Slice), not copies, so the
// features of all of them are computed, and cached, once (train.Config's
// Features).
func (r *runFlags) splits(trainSet, testSet *data.Dataset) (*data.Dataset, *data.Dataset, error) {
	var err error
	if r.validation > 0 {
		if r.validation >= trainSet.Len() {
			return nil, nil, usagef("-validation %d: the training split has only %d examples", r.validation, trainSet.Len())
		}
		keep := trainSet.Len() - r.validation
		name := trainSet.Name
		if testSet, err = trainSet.Slice(keep, trainSet.Len()); err != nil {
			return nil, nil, err
		}
		testSet.Name = name + " (validation: last " + strconv.Itoa(r.validation) + ")"
		if trainSet, err = trainSet.Slice(0, keep); err != nil {
			return nil, nil, err
		}
	}
	if r.trainLimit > 0 && r.trainLimit < trainSet.Len() {
		if trainSet, err = trainSet.Slice(0, r.trainLimit); err != nil {
			return nil, nil, err
		}
	}
	return trainSet, testSet, nil
}

// trainConfig is the train.Config of the run flags; "train run" and
// "train audit" both build theirs here.
func (r *runFlags) trainConfig(trainSet, testSet *data.Dataset) (train.Config, error) {
	trainSet, testSet, err := r.splits(trainSet, testSet)
	if err != nil {
		return train.Config{}, err
	}
	cfg, err := r.settings()
	if err != nil {
		return train.Config{}, err
	}
	cfg.Data.Train, cfg.Data.Test = trainSet, testSet
	if err := r.users.apply(&cfg); err != nil {
		return train.Config{}, err
	}
	return cfg, nil
}

// settings is the train.Config of the run flags without the data (and
// the owners -users deals).
func (r *runFlags) settings() (train.Config, error) {
	var (
		mech privacy.Mechanism
		err  error
	)
	if !r.nonPrivate {
		if mech, err = privacy.ParseMechanism(r.mechanism); err != nil {
			return train.Config{}, err
		}
	}
	acct, err := privacy.ParseAccountant(r.accountant)
	if err != nil {
		return train.Config{}, err
	}
	cfg := train.Config{
		Data:       train.Data{Validation: r.validation > 0},
		Model:      train.ModelSpec{Name: r.model, EmbeddingDim: r.embeddingDim, Groups: r.groups},
		Privacy:    privacy.Request{Steps: r.steps, Batch: r.batch, Mechanism: mech, Sampling: privacy.Sampling(r.sampling), Partitions: r.bands, ClipNorm: r.clip, NoiseMultiplier: r.sigma, Epsilon: r.eps, Delta: r.delta, Accountant: acct, CacheDir: r.cache},
		NonPrivate: r.nonPrivate,
		Optimizer:  train.Optimizer{Workload: train.WorkloadChoice(r.workload), LearningRate: r.lr, CooldownFrac: r.cooldown},
		Output:     train.Output{EvalEvery: r.evalEvery, MetricsPath: r.metrics},
	}
	if cfg.Data.Features, err = r.featureChoice(); err != nil {
		return train.Config{}, err
	}
	if cfg.Privacy.NoiseMultiplier > 0 {
		cfg.Privacy.Epsilon = 0
	}
	if cfg.Model.Hidden, err = r.hiddenSizes(); err != nil {
		return train.Config{}, err
	}
	if r.ema != 0 {
		cfg.Optimizer.EMA = &train.EMA{Decay: r.ema}
	}
	switch {
	case r.warmup > 0:
		cfg.Optimizer.Warmup = &train.Warmup{Steps: r.warmup}
	case r.warmup < 0:
		return train.Config{}, usagef("-warmup %d must not be negative (0: no warm-up)", r.warmup)
	}
	cfg.Optimizer.Rule = train.OptimizerChoice(r.optimizer)
	cfg.Optimizer.Momentum = r.momentum.v
	if !r.momentum.set && cfg.Optimizer.Rule != train.OptimizerAdam {
		cfg.Optimizer.Momentum = defaultMomentum(mech)
	}
	if r.seed != "" {
		cfg.Privacy.Seed, cfg.Privacy.InsecureSeed = []byte(r.seed), r.insecureSeed
	}
	if err := r.accuracy.apply(&cfg); err != nil {
		return train.Config{}, err
	}
	if r.dataset == "text" {
		// The model is built once the data give its vocabulary and
		// context (textFlags.backend).
		cfg.Model.Backend = textModelPending{}
	}
	return cfg, nil
}

// featureChoice is the -features of the run (scatter by default for
// -model scatternet).
func (r *runFlags) featureChoice() (train.Features, error) {
	switch r.features {
	case "":
		if r.model == "scatternet" {
			return train.FeaturesScatter, nil
		}
	case "none":
	case "scatter":
		return train.FeaturesScatter, nil
	default:
		return "", usagef("-features %q: want scatter or none", r.features)
	}
	return "", nil
}

// hiddenSizes is -hidden.
func (r *runFlags) hiddenSizes() ([]int, error) {
	var out []int
	if r.hidden == "" {
		return nil, nil
	}
	for _, h := range strings.Split(r.hidden, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(h))
		if err != nil || v <= 0 {
			return nil, usagef("-hidden %q: want positive integers", r.hidden)
		}
		out = append(out, v)
	}
	return out, nil
}

// checkNames refuses, before any data is read, the named choices that do
// not parse: -mechanism, -accountant, -features, -hidden.
func (r *runFlags) checkNames() error {
	if !r.nonPrivate {
		if _, err := privacy.ParseMechanism(r.mechanism); err != nil {
			return err
		}
	}
	if _, err := privacy.ParseAccountant(r.accountant); err != nil {
		return err
	}
	if _, err := r.featureChoice(); err != nil {
		return err
	}
	_, err := r.hiddenSizes()
	return err
}

// validate refuses, before any data is read or plan built, flag values
// that cannot run and output paths that cannot be written.
func (r *runFlags) validate(dirGiven bool) error {
	for _, c := range []struct {
		name string
		v    int
	}{{"train-examples", r.trainLimit}, {"eval-every", r.evalEvery}, {"checkpoint-every", r.ckptEvery}, {"bands", r.bands}, {"validation", r.validation}} {
		if c.v < 0 {
			return usagef("-%s %d must not be negative", c.name, c.v)
		}
	}
	if dirGiven && r.dir == "" {
		return usagef("-dir is empty")
	}
	if math.IsInf(r.eps, 0) || math.IsNaN(r.eps) {
		return usagef("-epsilon %v: want a positive finite epsilon (-non-private trains without privacy)", r.eps)
	}
	if err := r.checkNames(); err != nil {
		return err
	}
	for _, o := range []struct{ flag, path string }{{"json", r.jsonOut}, {"checkpoint", r.ckpt}, {"metrics", r.metrics}} {
		if o.path == "" || o.flag == "json" && o.path == "-" {
			continue
		}
		if err := checkOutput(o.flag, o.path); err != nil {
			return err
		}
	}
	return nil
}

// checkOutput refuses an output path that cannot be written, before any
// work is done.
func checkOutput(flagName, path string) error {
	if err := atomicfile.CheckWritable(path); err != nil {
		return usagef("-%s %s: cannot write there: %v", flagName, path, dpcore.Within("atomicfile", err))
	}
	return nil
}

// loadData loads the named dataset. With fallback (Fashion-MNIST without
// -dir, in "train" and "train run" alike), a missing Debian Fashion-MNIST
// falls back to the embedded subset; an explicit -dir that cannot be read
// is always an error.
func loadData(name, dir string, fallback bool) (trainSet, testSet *data.Dataset, source string, err error) {
	trainSet, testSet, source, err = loadDataset(name, dir, fallback)
	return trainSet, testSet, source, asInputError(err)
}

// asInputError marks a missing, unreadable, empty, truncated or corrupt
// dataset as bad input: it is fixed by giving another -dir.
func asInputError(err error) error {
	if err != nil && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, data.ErrFormat) || errors.Is(err, text.ErrFormat) || errors.Is(err, dpcore.ErrInvalid)) {
		return inputError{err}
	}
	return err
}

func loadDataset(name, dir string, fallback bool) (trainSet, testSet *data.Dataset, source string, err error) {
	switch name {
	case "embedded":
		trainSet, testSet, err = data.LoadEmbeddedFashionMNIST()
		return trainSet, testSet, "embedded Fashion-MNIST subset", err
	case "synthetic-cifar":
		trainSet, testSet, err = data.SyntheticCIFAR(50000, 10000, 1)
		return trainSet, testSet, "synthetic CIFAR-shaped data", err
	case data.NameFashionMNIST:
		if dir == "" {
			dir = data.DefaultFashionMNISTDir
		}
		trainSet, testSet, err = data.LoadNamed(name, dir)
		if err != nil && fallback && errors.Is(err, fs.ErrNotExist) {
			trainSet, testSet, err = data.LoadEmbeddedFashionMNIST()
			return trainSet, testSet, "embedded Fashion-MNIST subset (Debian's dataset-fashion-mnist not installed)", err
		}
		return trainSet, testSet, "Fashion-MNIST " + dir, mismatchHint(name, err)
	case data.NameMNIST, data.NameCIFAR10, data.NameCIFAR100:
		if dir == "" {
			return nil, nil, "", usagef("-data %s needs -dir", name)
		}
		trainSet, testSet, err = data.LoadNamed(name, dir)
		return trainSet, testSet, name + " " + dir, mismatchHint(name, err)
	case "npy":
		if dir == "" {
			return nil, nil, "", usagef("-data npy needs -dir (holding x_train.npy, y_train.npy, x_test.npy, y_test.npy)")
		}
		trainSet, testSet, err = data.LoadNPYDir(dir)
		return trainSet, testSet, "NumPy arrays in " + dir, err
	case "images":
		if dir == "" {
			return nil, nil, "", usagef("-data images needs -dir (holding train/CLASS/*.png|jpg and test/CLASS/*)")
		}
		trainSet, testSet, err = data.LoadImageFolder(dir)
		return trainSet, testSet, "images in " + dir, err
	}
	if name == "csv" {
		return nil, nil, "", usagef("-data csv is read by train run and train eval only")
	}
	if name == "text" {
		return nil, nil, "", usagef("-data text is read by train run only")
	}
	return nil, nil, "", usagef("-data %q: want fashion-mnist, mnist, cifar10, cifar100, embedded, synthetic-cifar, npy, images, csv or text", name)
}

// mismatchHint turns a directory of another dataset into a usage error
// that names the -data it holds: "-data mnist: DIR holds Fashion-MNIST
// (...), not MNIST; use -data fashion-mnist".
func mismatchHint(name string, err error) error {
	var me *data.MismatchError
	if !errors.As(err, &me) {
		return err
	}
	msg := "-data " + name + ": " + me.Reason()
	if me.FoundName != "" {
		msg += "; use -data " + me.FoundName
	}
	return usagef("%s", msg)
}

// defaultMomentum is the momentum when -momentum is not given: 0 for
// independent noise (DP-SGD, stamped or not) and for a non-private run
// (mech nil), 0.95 for a correlated-noise mechanism, whose encoder is
// factorized for the optimizer's momentum workload. It reads the
// mechanism's structure, not its name.
func defaultMomentum(mech privacy.Mechanism) float64 {
	if mech == nil || mech.Structure().Independent {
		return 0
	}
	return 0.95
}
