package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/train"
	"golang.org/x/term"
)

// runFlags are the flags of "train run" (and the defaults of plain "train").
type runFlags struct {
	dataset, dir, model, hidden, mechanism, workload, sampling, accountant string
	steps, batch, bands, evalEvery, ckptEvery                              int
	eps, delta, sigma, clip, lr, momentum, cooldown                        float64
	seed, ckpt, metrics, cache, config, jsonOut                            string
	nonPrivate, augment                                                    bool
	trainLimit                                                             int
}

func (r *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.config, "config", "", "JSON file with flag values (keys are flag names); explicit flags override it")
	fs.StringVar(&r.dataset, "data", "fashion-mnist", "fashion-mnist, mnist, cifar10, cifar100, embedded (the Fashion-MNIST subset shipped in the binary) or synthetic-cifar (CIFAR-shaped synthetic data for benchmarks)")
	fs.StringVar(&r.dir, "dir", "", "dataset directory (default: Debian's /usr/share/datasets/fashion-mnist for fashion-mnist)")
	fs.IntVar(&r.trainLimit, "train-examples", 0, "use only the first N training examples (0: all)")
	fs.StringVar(&r.model, "model", "mlp", "logistic, mlp or cnn")
	fs.StringVar(&r.hidden, "hidden", "128", "comma-separated hidden sizes of the MLP")
	fs.BoolVar(&r.augment, "augment", false, "random crop and flip (CIFAR)")
	fs.IntVar(&r.steps, "steps", 500, "training steps n")
	fs.IntVar(&r.batch, "batch", 250, "expected batch size B")
	fs.BoolVar(&r.nonPrivate, "non-private", false, "train without privacy (for comparison)")
	fs.StringVar(&r.mechanism, "mechanism", "bandmf:auto", "dpsgd, tree-online, tree-full, fft, fft-opt, mf-single, mf-kb, bandmf:N or bandmf:auto, optionally /sS")
	fs.StringVar(&r.workload, "workload", "optimizer", "factorize the optimizer's own momentum/cooldown workload (optimizer) or prefix sums (prefix)")
	fs.StringVar(&r.sampling, "sampling", "", "poisson, band-poisson, fixed-order or shuffle (default: by mechanism)")
	fs.IntVar(&r.bands, "bands", 0, "partitions of band sampling (default: the mechanism's bands)")
	fs.Float64Var(&r.eps, "epsilon", 8, "target epsilon (calibrates the noise multiplier)")
	fs.Float64Var(&r.delta, "delta", 0, "delta (default min(1e-5, 1/examples))")
	fs.Float64Var(&r.sigma, "sigma", 0, "noise multiplier (overrides -epsilon; epsilon is then reported)")
	fs.StringVar(&r.accountant, "accountant", "pld", "pld or rdp")
	fs.Float64Var(&r.clip, "clip", 1, "per-example clip norm zeta")
	fs.Float64Var(&r.lr, "lr", 0, "peak learning rate (default 0.5 for SGD, 0.1 with momentum)")
	fs.Float64Var(&r.momentum, "momentum", -1, "heavy-ball momentum (default: 0.95 for matrix mechanisms, 0 for dpsgd)")
	fs.Float64Var(&r.cooldown, "cooldown", 0.25, "fraction of steps cooled down linearly to 0.05x")
	fs.StringVar(&r.seed, "seed", "", "seed for a reproducible run (default: cryptographically random)")
	fs.IntVar(&r.evalEvery, "eval-every", 0, "evaluate every N steps (default steps/5)")
	fs.StringVar(&r.ckpt, "checkpoint", "", "checkpoint file: resumed from if present, written every -checkpoint-every steps and at the end")
	fs.IntVar(&r.ckptEvery, "checkpoint-every", 50, "steps between checkpoints")
	fs.StringVar(&r.metrics, "metrics", "", "JSON-lines metrics file")
	fs.StringVar(&r.cache, "cache", defaultCacheDir(), "directory caching optimized factorizations")
	fs.StringVar(&r.jsonOut, "json", "", "write the run's result (plan, ledger, final metrics) as JSON to this file (- for stdout)")
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
	var kv map[string]any
	if err := json.Unmarshal(b, &kv); err != nil {
		return usagef("-config %s: %v", path, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for k, v := range kv {
		if set[k] || k == "config" {
			continue
		}
		if fs.Lookup(k) == nil {
			return usagef("-config %s: unknown key %q", path, k)
		}
		if err := fs.Set(k, fmt.Sprint(v)); err != nil {
			return usagef("-config %s: %s: %v", path, k, err)
		}
	}
	return nil
}

func runDefault(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runTrainWith(ctx, "train", args, stdout, stderr, true)
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runTrainWith(ctx, "run", args, stdout, stderr, false)
}

func runTrainWith(ctx context.Context, name string, args []string, stdout, stderr io.Writer, isDefault bool) error {
	fs := newFlags(name, stderr)
	var r runFlags
	r.register(fs)
	clipPerLayer := fs.String("clip-per-layer", "", "comma-separated clip bounds, one per layer with parameters (replaces -clip; the sensitivity is their L2 norm)")
	saveModelPath := fs.String("save-model", "", "write the final model (architecture, parameters, privacy claim) to this file, for train eval and train predict")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if r.config != "" {
		if err := applyConfigFile(fs, r.config); err != nil {
			return err
		}
	}
	trainSet, testSet, source, err := loadData(r.dataset, r.dir, isDefault)
	if err != nil {
		return err
	}
	if r.trainLimit > 0 && r.trainLimit < trainSet.Len() {
		idx := make([]int, r.trainLimit)
		for i := range idx {
			idx[i] = i
		}
		if trainSet, err = trainSet.Subset(idx); err != nil {
			return err
		}
	}
	cfg := train.Config{
		Train: trainSet, Test: testSet, Augment: r.augment,
		ModelName: r.model, Steps: r.steps, Batch: r.batch,
		NonPrivate: r.nonPrivate, Mechanism: r.mechanism, Workload: train.WorkloadChoice(r.workload),
		Sampling: train.Sampling(r.sampling), Bands: r.bands, ClipNorm: r.clip,
		NoiseMultiplier: r.sigma, Epsilon: r.eps, Delta: r.delta, Accountant: r.accountant,
		LearningRate: r.lr, Momentum: r.momentum, CooldownFrac: r.cooldown,
		EvalEvery: r.evalEvery, CheckpointPath: r.ckpt, CheckpointEvery: r.ckptEvery,
		MetricsPath: r.metrics, CacheDir: r.cache, Log: stdout,
	}
	if cfg.NoiseMultiplier > 0 {
		cfg.Epsilon = 0
	}
	if r.hidden != "" {
		for _, h := range strings.Split(r.hidden, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(h))
			if err != nil || v <= 0 {
				return usagef("-hidden %q: want positive integers", r.hidden)
			}
			cfg.Hidden = append(cfg.Hidden, v)
		}
	}
	if *clipPerLayer != "" {
		clipSet := false
		fs.Visit(func(f *flag.Flag) { clipSet = clipSet || f.Name == "clip" })
		if clipSet {
			return usagef("-clip and -clip-per-layer exclude each other")
		}
		for _, f := range strings.Split(*clipPerLayer, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || !(v > 0) || math.IsInf(v, 0) {
				return usagef("-clip-per-layer %q: want positive numbers", *clipPerLayer)
			}
			cfg.ClipPerLayer = append(cfg.ClipPerLayer, v)
		}
	}
	if r.momentum < 0 {
		cfg.Momentum = 0.95
		if strings.HasPrefix(r.mechanism, "dpsgd") || r.nonPrivate {
			cfg.Momentum = 0
		}
	}
	if r.seed != "" {
		cfg.Seed = []byte(r.seed)
	}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		cfg.Progress = stderr
	}
	fmt.Fprintf(stdout, "data: %s (%d train, %d test examples)\n", source, trainSet.Len(), testSet.Len())
	if *saveModelPath != "" {
		if cfg.Model, err = train.NewModel(cfg); err != nil {
			return err
		}
	}
	res, err := train.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "test accuracy %.4f, test loss %.4f after %d steps (%.1fs)\n", res.Final.Accuracy, res.Final.Loss, res.Steps, res.Elapsed.Seconds())
	if res.Plan != nil {
		fmt.Fprintf(stdout, "privacy: (epsilon %.4g, delta %.3g), %s accounting, mechanism %s, noise multiplier %.5g\n",
			res.Plan.Epsilon, res.Plan.Delta, res.Plan.Accountant, res.Plan.Mechanism, res.Plan.NoiseMultiplier)
	} else {
		fmt.Fprintln(stdout, "privacy: none (non-private run)")
	}
	if *saveModelPath != "" {
		if err := saveModel(*saveModelPath, cfg, res, r.seed != ""); err != nil {
			return err
		}
	}
	if r.jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if r.jsonOut == "-" {
			_, err = stdout.Write(append(b, '\n'))
			return err
		}
		return os.WriteFile(r.jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// loadData loads the named dataset. The default run falls back to the
// embedded Fashion-MNIST subset when Debian's package is not installed.
func loadData(name, dir string, isDefault bool) (trainSet, testSet *data.Dataset, source string, err error) {
	switch name {
	case "embedded":
		trainSet, testSet, err = data.LoadEmbeddedFashionMNIST()
		return trainSet, testSet, "embedded Fashion-MNIST subset", err
	case "fashion-mnist":
		if dir == "" {
			dir = data.DefaultFashionMNISTDir
		}
		trainSet, testSet, err = data.LoadFashionMNIST(dir)
		if err != nil && isDefault {
			trainSet, testSet, err = data.LoadEmbeddedFashionMNIST()
			return trainSet, testSet, "embedded Fashion-MNIST subset (Debian's dataset-fashion-mnist not installed)", err
		}
		return trainSet, testSet, "Fashion-MNIST " + dir, err
	case "synthetic-cifar":
		trainSet, testSet, err = data.SyntheticCIFAR(50000, 10000, 1)
		return trainSet, testSet, "synthetic CIFAR-shaped data", err
	case "mnist", "cifar10", "cifar100":
		if dir == "" {
			return nil, nil, "", usagef("-data %s needs -dir", name)
		}
		trainSet, testSet, err = data.LoadDir(dir)
		return trainSet, testSet, name + " " + dir, err
	}
	return nil, nil, "", usagef("-data %q: want fashion-mnist, mnist, cifar10, cifar100, embedded or synthetic-cifar", name)
}
