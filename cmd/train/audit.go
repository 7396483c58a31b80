package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/dpmf-go/dpmf/audit"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/train"
)

// auditOnlyFlags are the flags of "train audit" that "train run" refuses
// by name, so that validating the auditor can never leak into training.
var auditOnlyFlags = []string{"unsafe-noise-scale", "canaries", "audit", "confidence", "search"}

// runTrainRefusingAuditFlags is "train run", refusing the audit-only flags
// with an explanation instead of a bare "flag provided but not defined".
func runTrainRefusingAuditFlags(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		name := strings.TrimLeft(a, "-")
		if i := strings.IndexByte(name, '='); i >= 0 {
			name = name[:i]
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		for _, f := range auditOnlyFlags {
			if name == f {
				if f == "unsafe-noise-scale" {
					return usagef("-unsafe-noise-scale is refused by train run: it breaks the privacy claim and exists only for train audit")
				}
				return usagef("-%s belongs to train audit, not train run", f)
			}
		}
	}
	return runTrain(ctx, args, stdout, stderr)
}

// auditJSON is the JSON of "train audit"; keys are stable.
type auditJSON struct {
	Epsilon           dpcore.Epsilon `json:"epsilon"`
	Delta             float64        `json:"delta"`
	EpsilonLowerBound dpcore.Epsilon `json:"epsilon_lower_bound"`
	Confidence        float64        `json:"confidence"`
	Canaries          int            `json:"canaries"`
	// Unit is the unit of privacy audited; at user level each canary is a
	// user of CanaryExamples examples.
	Unit             string        `json:"unit"`
	CanaryExamples   int           `json:"canary_examples"`
	Mechanism        string        `json:"mechanism"`
	Bands            int           `json:"bands,omitempty"`
	Audit            string        `json:"audit"`
	UnsafeNoiseScale float64       `json:"unsafe_noise_scale,omitempty"`
	ClaimViolated    bool          `json:"claim_violated"`
	Guesses          audit.Guesses `json:"guesses"`
	GuessIn          int           `json:"guess_in"`
	GuessOut         int           `json:"guess_out"`
	Search           string        `json:"search"`
	Thresholds       int           `json:"thresholds"`
	NoiseMultiplier  float64       `json:"noise_multiplier"`
	// The f-DP (Gaussian) reading, unamplified plans only; claim_violated
	// is the one verdict, gdp_claim_violated says this reading found it.
	MuClaimed            float64        `json:"mu_claimed,omitempty"`
	MuLowerBound         float64        `json:"mu_lower_bound,omitempty"`
	GDPEpsilonLowerBound dpcore.Epsilon `json:"gdp_epsilon_lower_bound,omitempty"`
	GDPClaimViolated     bool           `json:"gdp_claim_violated,omitempty"`
	Accountant           string         `json:"accountant"`
	TestAccuracy         float64        `json:"test_accuracy"`
	Seconds              float64        `json:"seconds"`
}

// runAudit is "train audit": the flags of "train run" plus the audit's.
func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("audit", stderr)
	var r runFlags
	r.register(fs)
	canaries := fs.Int("canaries", 1000, "number of canaries m, each included with probability 1/2")
	mode := fs.String("audit", "whitebox", "whitebox (gradient canaries, every noisy update observed) or blackbox (mislabelled held-out examples, final model only)")
	confidence := fs.Float64("confidence", 0.95, "confidence of the lower bound")
	search := fs.String("search", "bonferroni", "threshold search: bonferroni (valid at the stated confidence) or uncorrected (best of the grid, as Steinke et al. report; confidence nominal)")
	format := fs.String("format", "text", "text or json (the result on stdout)")
	unsafe := fs.Float64("unsafe-noise-scale", 1, "UNSAFE, for validating the auditor only: multiply the noise actually added by S while the plan still claims the original epsilon")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if r.config != "" {
		if err := applyConfigFile(fs, r.config); err != nil {
			return err
		}
	}
	dirGiven := false
	fs.Visit(func(f *flag.Flag) { dirGiven = dirGiven || f.Name == "dir" })
	if err := r.validate(dirGiven); err != nil {
		return err
	}
	if err := refuseExplicitZero(fs, zeroMeansDefault); err != nil {
		return err
	}
	opt, err := auditOptions(*canaries, *mode, *confidence, *search, *unsafe)
	if err != nil {
		return err
	}
	if *format != "text" && *format != "json" {
		return usagef("-format %q: want text or json", *format)
	}
	if r.nonPrivate {
		return usagef("-non-private: a non-private run has no claim to audit")
	}
	if r.ckpt != "" {
		return usagef("-checkpoint: an audit is one uninterrupted run")
	}
	trainSet, testSet, source, err := loadData(r.dataset, r.dir, false)
	if err != nil {
		return err
	}
	cfg, err := r.trainConfig(trainSet, testSet)
	if err != nil {
		return err
	}
	log := stdout
	if *format == "json" {
		log = stderr // stdout carries exactly one JSON object
	}
	cfg.Output.Log = log
	if *unsafe != 1 {
		fmt.Fprintf(stderr, "train: WARNING: -unsafe-noise-scale %g adds %g times the planned noise; the printed claim does NOT hold for this run (auditor validation only)\n", *unsafe, *unsafe)
	}
	finishBar := attachTrainingBar(&cfg, terminal(stderr))
	fmt.Fprintf(log, "data: %s (%d train, %d test examples); %s audit with %d canaries\n", source, cfg.Data.Train.Len(), cfg.Data.Test.Len(), *mode, *canaries)
	res, err := train.Audit(ctx, cfg, opt)
	finishBar()
	if err != nil {
		return err
	}
	if *format == "json" {
		b, err := json.MarshalIndent(newAuditJSON(res), "", "  ")
		if err != nil {
			return err
		}
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	printAudit(stdout, res)
	return nil
}

// auditOptions parses the audit's flags into train.AuditOptions.
func auditOptions(canaries int, mode string, confidence float64, search string, unsafe float64) (train.AuditOptions, error) {
	opt := train.AuditOptions{Canaries: canaries, Confidence: confidence, UnsafeNoiseScale: unsafe}
	switch mode {
	case "whitebox":
		opt.Mode = train.AuditWhitebox
	case "blackbox":
		opt.Mode = train.AuditBlackbox
	default:
		return opt, usagef("-audit %q: want whitebox or blackbox", mode)
	}
	switch search {
	case "bonferroni":
		opt.Search = audit.Bonferroni
	case "uncorrected":
		opt.Search = audit.Uncorrected
	default:
		return opt, usagef("-search %q: want bonferroni or uncorrected", search)
	}
	switch {
	case canaries < 2:
		return opt, usagef("-canaries %d: want at least 2", canaries)
	case !(confidence > 0 && confidence < 1):
		return opt, usagef("-confidence %v: want a value in (0, 1)", confidence)
	case !(unsafe > 0):
		return opt, usagef("-unsafe-noise-scale %v: want a positive factor", unsafe)
	}
	return opt, nil
}

// newAuditJSON is the JSON of an audit's result.
func newAuditJSON(res *train.AuditResult) auditJSON {
	out := auditJSON{
		Epsilon: dpcore.Epsilon(res.Epsilon), Delta: res.Delta, EpsilonLowerBound: dpcore.Epsilon(res.EpsilonLowerBound), Confidence: res.Confidence,
		Canaries: res.Canaries, Mechanism: res.Mechanism, Bands: res.Plan.Bands, Audit: res.Audit, UnsafeNoiseScale: res.UnsafeNoiseScale,
		ClaimViolated: res.Violated, Guesses: res.Bound.Guesses, GuessIn: res.Bound.GuessIn, GuessOut: res.Bound.GuessOut,
		Search: res.Bound.Search, Thresholds: res.Bound.Thresholds, NoiseMultiplier: res.Plan.NoiseMultiplier,
		Accountant: string(res.Plan.Accountant), TestAccuracy: res.Final.Accuracy, Seconds: res.Elapsed,
		Unit: res.Unit, CanaryExamples: res.CanaryExamples,
	}
	if res.GDP != nil {
		out.MuClaimed, out.MuLowerBound = res.MuClaimed, res.GDP.MuLowerBound
		out.GDPEpsilonLowerBound, out.GDPClaimViolated = dpcore.Epsilon(res.GDP.EpsilonLowerBound), res.GDPViolated
	}
	return out
}

// printAudit writes an audit's result as text.
func printAudit(stdout io.Writer, res *train.AuditResult) {
	fmt.Fprintf(stdout, "audit (%s, %s, per %s): epsilon >= %.4g at %.0f%% confidence (delta %.3g); claimed epsilon %.4g\n",
		res.Audit, res.Mechanism, res.Unit, res.EpsilonLowerBound, 100*res.Confidence, res.Delta, res.Epsilon)
	if res.Unit == "user" {
		fmt.Fprintf(stdout, "  canaries are users of %d examples each\n", res.CanaryExamples)
	}
	fmt.Fprintf(stdout, "  %d canaries (%d IN), %d guesses (top %d IN, bottom %d OUT), %d correct; %d thresholds, %s search; %.1fs\n",
		res.Canaries, res.Bound.Included, res.Bound.Guesses.Guesses, res.Bound.GuessIn, res.Bound.GuessOut, res.Bound.Guesses.Correct,
		res.Bound.Thresholds, res.Bound.Search, res.Elapsed)
	if res.GDP != nil {
		fmt.Fprintf(stdout, "  f-DP reading (the plan claims %.4g-GDP): mu >= %.4g, i.e. epsilon >= %.4g for a Gaussian-shaped run\n",
			res.MuClaimed, res.GDP.MuLowerBound, res.GDP.EpsilonLowerBound)
		fmt.Fprintf(stdout, "  two readings, each at %.4g%% confidence, so that the one verdict holds at %.0f%%\n", 100*res.GDP.Confidence, 100*res.Confidence)
	}
	if res.Violated {
		if res.EpsilonLowerBound > res.Epsilon {
			fmt.Fprintf(stdout, "  CLAIM VIOLATED: the run leaks more than epsilon %.4g", res.Epsilon)
		} else {
			fmt.Fprintf(stdout, "  CLAIM VIOLATED: the run is not %.4g-GDP, which its accounting assumes", res.MuClaimed)
		}
		if res.UnsafeNoiseScale != 0 {
			fmt.Fprintf(stdout, " (expected: the noise was scaled by %g)", res.UnsafeNoiseScale)
		}
		fmt.Fprintln(stdout)
	}
}
