package main

// train sweep: a grid of mechanisms x samplings x epsilons x seeds over one
// recipe (the flags of train run, or a -config file), each run in this
// process by train.Run as train run does, recorded in an append-only
// results file so that a killed sweep resumes without rerunning finished
// runs, then summarized (CSV, Markdown) and drawn. With -select it tunes
// privately instead (sweepselect.go).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/accplot"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
)

// sweepFlags are the flags train sweep adds to those of train run.
type sweepFlags struct {
	mechanisms, samplings, epsilons string
	seeds                           int
	out, marks                      string
	sel                             selectFlags
}

func (s *sweepFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.mechanisms, "mechanisms", "", "comma-separated mechanisms of the grid (default: the recipe's -mechanism)")
	fs.StringVar(&s.samplings, "samplings", "", "comma-separated samplings of the grid: poisson, band-poisson, fixed-order, shuffle, random-allocation, band-allocation or default (the mechanism's; default: the recipe's -sampling)")
	fs.StringVar(&s.epsilons, "epsilons", "", "comma-separated target epsilons of the grid (default: the recipe's -epsilon)")
	fs.IntVar(&s.seeds, "seeds", 1, "runs of every grid point, each with its own seed")
	fs.StringVar(&s.out, "out", "", "directory of the sweep (required): runs.jsonl (one line per run, appended; a sweep run again resumes from it), summary.csv, summary.md, accuracy.png and .svg")
	fs.StringVar(&s.marks, "marks", "", "published results to mark on the plot: a JSON array of {label, epsilon, accuracy} (e.g. configs/fashion-marks.json)")
	s.sel.register(fs)
}

// sweepRefused are flags of train run a sweep sets itself or has no use
// for: refused on the command line and in -config.
var sweepRefused = map[string]string{
	"mechanism":   "use -mechanisms",
	"sampling":    "use -samplings",
	"epsilon":     "use -epsilons",
	"sigma":       "a sweep calibrates every run to its -epsilons",
	"non-private": "a sweep compares private runs",
	"json":        "every run's result is a line of -out's runs.jsonl",
	"checkpoint":  "every run checkpoints under -out",
	"metrics":     "the sweep records each run's result, not its steps",
}

// sweepGrid is the parsed grid.
type sweepGrid struct {
	mechanisms []string
	samplings  []privacy.Sampling // SamplingAuto: the mechanism's default
	epsilons   []float64
	seeds      int
}

// cells lists the grid's runs: by epsilon, mechanism, sampling, seed.
func (g sweepGrid) cells() []sweepCell {
	var cs []sweepCell
	for _, e := range g.epsilons {
		for _, m := range g.mechanisms {
			for _, s := range g.samplings {
				for k := range g.seeds {
					cs = append(cs, sweepCell{Mechanism: m, Sampling: s, Epsilon: e, Seed: k})
				}
			}
		}
	}
	return cs
}

// sweep is a parsed train sweep with its data loaded.
type sweep struct {
	r                 runFlags
	grid              sweepGrid
	dir               string
	marks             []accplot.Mark
	sel               *selectFlags // nil: no selection
	selections        selectionOutput
	trainSet, testSet *data.Dataset
	source            string
	log               *sweepLog
	stdout, stderr    io.Writer
	tty               io.Writer
	seedWeak          bool // the -seed has fewer than privacy.MinSeedBits bits
	// ran counts the runs this process trained; configure, if set,
	// adjusts each run's configuration (tests: to cancel mid-run).
	ran       int
	configure func(*train.Config)
	// done, elapsed: runs finished by this process and their time, for
	// the estimate of the time left.
	done    int
	elapsed time.Duration
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, err := parseSweep(args, stdout, stderr)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

// run runs the grid (or the selections) and writes the summary.
func (s *sweep) run(ctx context.Context) (err error) {
	defer s.log.close()
	if s.sel != nil {
		err = s.runSelections(ctx)
	} else {
		err = s.runGrid(ctx)
	}
	// The per-run checkpoints are removed as runs finish; so is their
	// directory once empty.
	os.Remove(filepath.Join(s.dir, "checkpoints"))
	os.Remove(filepath.Join(s.dir, "models"))
	if err != nil {
		return err
	}
	return s.writeSummary()
}

// parseSweep parses and checks the command line, loads the data and opens
// the results file.
func parseSweep(args []string, stdout, stderr io.Writer) (*sweep, error) {
	fs := newFlags("sweep", stderr)
	s := &sweep{stdout: stdout, stderr: stderr}
	var sf sweepFlags
	s.r.register(fs)
	sf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	refused := make([]string, 0, len(sweepRefused))
	for name := range sweepRefused {
		refused = append(refused, name)
	}
	sort.Strings(refused) // the same message on every run
	for _, name := range refused {
		if given[name] {
			return nil, usagef("sweep: -%s is not a sweep flag (%s)", name, sweepRefused[name])
		}
	}
	if s.r.config != "" {
		if err := applyConfigFile(fs, s.r.config); err != nil {
			return nil, err
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"sigma", "non-private", "json", "checkpoint", "metrics"} {
		if set[name] {
			return nil, usagef("sweep: -config %s sets %q, which a sweep does not take (%s)", s.r.config, name, sweepRefused[name])
		}
	}
	if sf.out == "" {
		return nil, usagef("sweep: -out DIR is required")
	}
	if st, err := os.Stat(sf.out); err == nil && !st.IsDir() {
		return nil, usagef("sweep: -out %s is not a directory", sf.out)
	}
	s.dir = sf.out
	if sf.marks != "" {
		var err error
		if s.marks, err = accplot.ReadMarks(sf.marks); err != nil {
			return nil, usagef("sweep: -marks: %v", dpcore.Within("accplot", err))
		}
	}
	if s.r.dataset == "csv" {
		return nil, usagef("sweep: -data csv is not supported (train run takes it)")
	}
	if err := s.r.validate(set["dir"]); err != nil {
		return nil, err
	}
	if err := refuseExplicitZero(fs, zeroMeansDefault); err != nil {
		return nil, err
	}
	var err error
	if s.grid, err = parseGrid(sf, s.r); err != nil {
		return nil, err
	}
	if s.r.seed != "" {
		if _, err := privacy.NoiseAssumptions([]byte(s.r.seed), s.r.insecureSeed); err != nil {
			return nil, err
		}
		s.seedWeak = privacy.SeedBits([]byte(s.r.seed)) < privacy.MinSeedBits
	}
	if set["select"] {
		if err := sf.sel.check(s.r, given["seeds"]); err != nil {
			return nil, err
		}
		for _, samp := range s.grid.samplings {
			if samp == privacy.SamplingRandomAllocation || samp == privacy.SamplingBandAllocation {
				return nil, usagef("sweep: -select with %s sampling: %s", samp, noAllocationRDP)
			}
		}
		s.sel = &sf.sel
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, usagef("sweep: -out: %v", err)
	}
	for _, name := range []string{"summary.csv", "summary.md", "accuracy.png", "accuracy.svg"} {
		if err := checkOutput("out", filepath.Join(s.dir, name)); err != nil {
			return nil, err
		}
	}
	// The data are read once; every run takes its splits from them.
	if s.trainSet, s.testSet, s.source, err = loadData(s.r.dataset, s.r.dir, !set["dir"]); err != nil {
		return nil, err
	}
	// A recipe that cannot make a run (-validation larger than the data,
	// bad -hidden) is refused now, not recorded against every cell.
	if _, err := s.cellConfig(s.grid.cells()[0]); err != nil {
		return nil, err
	}
	if s.log, err = openSweepLog(filepath.Join(s.dir, "runs.jsonl")); err != nil {
		return nil, err
	}
	if err := s.checkRecipe(fs); err != nil {
		s.log.close()
		return nil, err
	}
	s.tty = terminal(stderr)
	return s, nil
}

// parseGrid parses the grid flags (the recipe's own values by default).
func parseGrid(sf sweepFlags, r runFlags) (sweepGrid, error) {
	g := sweepGrid{seeds: sf.seeds}
	if sf.seeds < 1 {
		return g, usagef("sweep: -seeds %d: want at least 1", sf.seeds)
	}
	mechs := sf.mechanisms
	if mechs == "" {
		mechs = r.mechanism
	}
	for _, m := range splitList(mechs) {
		if _, err := privacy.ParseMechanism(m); err != nil {
			return g, usagef("sweep: -mechanisms: %v", err)
		}
		g.mechanisms = appendNew(g.mechanisms, m)
	}
	samps := sf.samplings
	if samps == "" {
		samps = r.sampling
	}
	if samps == "" {
		samps = "default"
	}
	for _, name := range splitList(samps) {
		s := privacy.Sampling(name)
		switch s {
		case privacy.SamplingPoisson, privacy.SamplingBandPoisson, privacy.SamplingFixedOrder, privacy.SamplingShuffle, privacy.SamplingRandomAllocation, privacy.SamplingBandAllocation:
		case "default":
			s = privacy.SamplingAuto
		default:
			return g, usagef("sweep: -samplings %q: want poisson, band-poisson, fixed-order, shuffle, random-allocation, band-allocation or default", name)
		}
		g.samplings = appendNew(g.samplings, s)
	}
	if sf.epsilons == "" {
		g.epsilons = []float64{r.eps}
	} else {
		for _, f := range splitList(sf.epsilons) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || !(v > 0) || math.IsInf(v, 0) {
				return g, usagef("sweep: -epsilons %q: want positive finite numbers", sf.epsilons)
			}
			g.epsilons = appendNew(g.epsilons, v)
		}
	}
	if len(g.mechanisms) == 0 || len(g.samplings) == 0 || len(g.epsilons) == 0 {
		return g, usagef("sweep: the grid is empty")
	}
	return g, nil
}

func appendNew[T comparable](xs []T, x T) []T {
	for _, y := range xs {
		if y == x {
			return xs
		}
	}
	return append(xs, x)
}

// recipe is every flag of the run that is not the grid's, by name: what a
// resumed sweep must share with the sweep that wrote the file. The seed
// itself is a secret and is not written; whether there is one is.
func (s *sweep) recipe(fs *flag.FlagSet) map[string]string {
	skip := map[string]bool{"config": true, "cache": true, "mechanisms": true, "samplings": true, "epsilons": true,
		"seeds": true, "out": true, "marks": true, "seed": true}
	for name := range sweepRefused {
		skip[name] = true
	}
	m := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if !skip[f.Name] {
			m[f.Name] = f.Value.String()
		}
	})
	m["seeded"] = strconv.FormatBool(s.r.seed != "")
	return m
}

// checkRecipe writes the recipe at the head of a new results file, and
// refuses to resume a file written with another. A flag the file does not
// name (added to train after it was written) matches at its default.
func (s *sweep) checkRecipe(fs *flag.FlagSet) error {
	want := s.recipe(fs)
	if len(s.log.records) == 0 {
		return s.log.append(sweepRecord{Kind: "sweep", Recipe: want})
	}
	head := s.log.records[0]
	if head.Kind != "sweep" {
		return usagef("sweep: %s does not start with a sweep record: not a results file of train sweep", s.log.path)
	}
	var diff []string
	for k, v := range want {
		old, ok := head.Recipe[k]
		if !ok && fs.Lookup(k) != nil && v == fs.Lookup(k).DefValue {
			// A flag newer than the file, at its default: the file's
			// runs had the default behaviour.
			continue
		}
		if !ok || old != v {
			diff = append(diff, fmt.Sprintf("-%s %q (was %q)", k, v, head.Recipe[k]))
		}
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		return usagef("sweep: %s holds runs of another recipe: %s; use another -out, or the recipe it was written with", s.log.path, strings.Join(diff, ", "))
	}
	return nil
}

// runGrid runs every cell of the grid that the results file does not hold.
func (s *sweep) runGrid(ctx context.Context) error {
	cells := s.grid.cells()
	have := s.log.runs()
	var todo []sweepCell
	for _, c := range cells {
		if _, ok := have[c.key()]; !ok {
			todo = append(todo, c)
		}
	}
	fmt.Fprintf(s.stdout, "sweep: %d runs (%d mechanisms x %d samplings x %d epsilons x %d seeds) of %s; %d already in %s, %d to run\n",
		len(cells), len(s.grid.mechanisms), len(s.grid.samplings), len(s.grid.epsilons), s.grid.seeds, s.source,
		len(cells)-len(todo), s.log.path, len(todo))
	if s.log.dropped > 0 {
		fmt.Fprintf(s.stdout, "sweep: dropped a torn last line of %s (a run killed while being recorded; it runs again)\n", s.log.path)
	}
	for i, c := range todo {
		what := fmt.Sprintf("run %d of %d", len(cells)-len(todo)+i+1, len(cells))
		fmt.Fprintf(s.stderr, "sweep: %s: %s\n", what, c.describe())
		rec, err := s.runCell(ctx, c)
		if err != nil {
			return err
		}
		if err := s.log.append(rec); err != nil {
			return err
		}
		s.removeCheckpoint(c)
		s.progress(rec, len(todo)-i-1, what)
	}
	return nil
}

// cellSeed is the seed of a cell's run: the sweep's -seed with the cell
// appended (nil: crypto/rand).
func (s *sweep) cellSeed(c sweepCell) string {
	if s.r.seed == "" {
		return ""
	}
	return s.r.seed + "/" + c.key()
}

// checkpointPath is where a cell's run checkpoints: a killed run resumes
// there.
func (s *sweep) checkpointPath(c sweepCell) string {
	h := sha256.Sum256([]byte(c.key()))
	return filepath.Join(s.dir, "checkpoints", hex.EncodeToString(h[:8])+".ckpt")
}

// modelPath is where a selection run's model waits for the selection.
func (s *sweep) modelPath(c sweepCell) string {
	h := sha256.Sum256([]byte(c.key()))
	return filepath.Join(s.dir, "models", hex.EncodeToString(h[:8])+".model")
}

func (s *sweep) removeCheckpoint(c sweepCell) {
	os.Remove(s.checkpointPath(c))
}

// cellConfig is the train.Config of a cell's run: the recipe with the
// cell's mechanism, sampling, epsilon and seed, as train run builds it.
func (s *sweep) cellConfig(c sweepCell) (train.Config, error) {
	r := s.r
	r.mechanism, r.sampling, r.eps = c.Mechanism, string(c.Sampling), c.Epsilon
	r.seed = s.cellSeed(c)
	r.insecureSeed = r.insecureSeed || s.seedWeak
	cfg, err := r.trainConfig(s.trainSet, s.testSet)
	if err != nil {
		return cfg, err
	}
	cfg.Output.Log = nil
	return cfg, nil
}

// runCell trains one cell in this process. A run the planner refuses, or
// whose configuration is invalid, is recorded with its error (it would
// fail again); an interruption or any other failure stops the sweep.
func (s *sweep) runCell(ctx context.Context, c sweepCell) (sweepRecord, error) {
	rec := sweepRecord{Kind: "run", Cell: &c, InsecureSeed: s.r.seed != "" && s.seedWeak}
	start := time.Now()
	cfg, err := s.cellConfig(c)
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(s.checkpointPath(c)), 0o755); err != nil {
			return rec, fmt.Errorf("sweep: %w", err)
		}
		cfg.Output.CheckpointPath, cfg.Output.CheckpointEvery = s.checkpointPath(c), s.r.ckptEvery
		if s.sel == nil {
			// One line per evaluation, as train run writes; a selection's
			// runs show no accuracy before the selection is made.
			evalLines := newEvalProgress(s.stderr, cfg.Privacy.Steps, s.tty != nil)
			cfg.Output.OnStep, cfg.Output.OnEval = evalLines.step, evalLines.eval
		} else if cfg.Model.Built, err = train.NewModel(cfg); err != nil {
			// (a handle on the parameters, to save the model)
			return rec, err
		}
		if s.configure != nil {
			s.configure(&cfg)
		}
		finish := attachTrainingBar(&cfg, s.tty)
		if s.sel != nil {
			cfg.Output.OnEval = nil // the bar would show the validation accuracy
		}
		s.ran++
		rec.Result, err = train.Run(ctx, cfg)
		finish()
	}
	rec.Seconds = time.Since(start).Seconds()
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, train.ErrInterrupted) {
			return rec, fmt.Errorf("sweep: %w (the sweep too: its finished runs are kept in %s)", err, s.log.path)
		}
		if errors.Is(err, train.ErrCorruptCheckpoint) {
			// Not the cell's fault: its checkpoint from an earlier sweep
			// does not fit (another -seed, other data).
			return rec, fmt.Errorf("sweep: %s: %w; remove %s to run it afresh", c.describe(), err, s.checkpointPath(c))
		}
		var ue usageError
		if !isInvalid(err) && !errors.As(err, &ue) {
			return rec, err
		}
		rec.Result, rec.Error = nil, oneLine(err.Error())
		return rec, nil
	}
	if rec.InsecureSeed && rec.Result.Plan != nil {
		// The cell's seed is longer than the sweep's, not stronger.
		as, _ := privacy.NoiseAssumptions([]byte(s.r.seed), true)
		rec.Result.Plan.Ledger.Assumptions = appendNew(rec.Result.Plan.Ledger.Assumptions, as[len(as)-1])
	}
	if s.sel != nil {
		// A selection run's model, kept until the selection is made (the
		// selected one is then released under the selection's claim).
		path := s.modelPath(c)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return rec, fmt.Errorf("sweep: %w", err)
		}
		if err := saveModel(path, cfg, rec.Result, s.r.seed != "", nil); err != nil {
			return rec, fmt.Errorf("sweep: saving the model of %s: %w", c.describe(), err)
		}
	}
	return rec, nil
}

// describe names the cell in progress lines.
func (c sweepCell) describe() string {
	msg := fmt.Sprintf("%s, %s, epsilon %g", c.Mechanism, c.samplingLabel(), c.Epsilon)
	if c.Draw > 0 {
		return msg + fmt.Sprintf(", selection run %d", c.Draw)
	}
	return msg + fmt.Sprintf(", seed %d", c.Seed)
}

// progress says a run finished and about how long the rest will take.
func (s *sweep) progress(rec sweepRecord, left int, what string) {
	s.done++
	s.elapsed += time.Duration(rec.Seconds * float64(time.Second))
	msg := fmt.Sprintf("sweep: %s: %s", what, rec.Cell.describe())
	switch {
	case rec.Error != "":
		msg += ": refused: " + rec.Error
	case rec.Score != nil:
		msg += fmt.Sprintf(": done in %.1fs (its score is kept for the selection)", rec.Seconds)
	default:
		f := rec.Result.Final
		msg += fmt.Sprintf(": %s accuracy %.4f in %.1fs", f.Split, f.Accuracy, rec.Seconds)
	}
	if left > 0 {
		per := s.elapsed / time.Duration(s.done)
		msg += fmt.Sprintf("; %d to go, about %s left", left, (per * time.Duration(left)).Round(time.Second))
	}
	fmt.Fprintln(s.stderr, msg)
}
