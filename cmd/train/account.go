package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
)

// isInvalid reports whether err is input the user can fix: a bad argument
// (dpcore.ErrInvalid), a plan the planner refused (a *privacy.Refusal,
// whatever its rule) or a corrupt checkpoint.
func isInvalid(err error) bool {
	var refused *privacy.Refusal
	return errors.Is(err, dpcore.ErrInvalid) || errors.As(err, &refused) || errors.Is(err, train.ErrCorruptCheckpoint)
}

// accountResult is the JSON of "train account"; keys are stable and always
// present: q and bands are null where the mechanism has none, and epsilon
// is the string "+Inf" when there is no finite guarantee.
type accountResult struct {
	Mechanism    string         `json:"mechanism"`
	Epsilon      dpcore.Epsilon `json:"epsilon"`
	Delta        float64        `json:"delta"`
	Sigma        float64        `json:"sigma"`
	Accountant   string         `json:"accountant"`
	Q            *float64       `json:"q"`
	Compositions int            `json:"compositions"`
	Bands        *int           `json:"bands"`
	Calibrated   bool           `json:"calibrated"`
}

// accountFlags are the flags a -mechanism reads; giving another is an
// error rather than silently ignored.
func accountFlags(mech string) ([]string, bool) {
	switch mech {
	case "gaussian":
		return nil, true
	case "dpsgd":
		return []string{"q", "examples", "batch", "steps"}, true
	case "bandmf":
		return []string{"examples", "batch", "steps", "bands"}, true
	}
	return nil, false
}

func runAccount(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("account", stderr)
	mech := fs.String("mechanism", "gaussian", "gaussian (one Gaussian mechanism, e.g. an unamplified MF mechanism with sensitivity 1), dpsgd (Poisson-subsampled), or bandmf (amplified banded MF)")
	sigma := fs.Float64("sigma", 0, "noise multiplier: report epsilon")
	eps := fs.Float64("epsilon", 0, "target epsilon: report the noise multiplier")
	delta := fs.Float64("delta", privacy.DefaultDelta(0), "delta")
	q := fs.Float64("q", 0, "sampling rate (dpsgd); or give -examples and -batch")
	examples := fs.Int("examples", 0, "number of training examples M (dpsgd, bandmf)")
	batch := fs.Int("batch", 0, "expected batch size B (dpsgd, bandmf)")
	steps := fs.Int("steps", 1, "number of steps T (dpsgd, bandmf)")
	bands := fs.Int("bands", 1, "number of bands (bandmf)")
	acctName := fs.String("accountant", "pld", "pld or rdp")
	format := fs.String("format", "json", "json or table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := refuseExplicitZero(fs, map[string]string{"q": "want a sampling rate in (0,1] (omit -q to derive it from -examples and -batch)"}); err != nil {
		return err
	}
	reads, ok := accountFlags(*mech)
	if !ok {
		return usagef("account: -mechanism %q: want gaussian, dpsgd or bandmf", *mech)
	}
	var ignored []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "q", "examples", "batch", "steps", "bands":
			for _, r := range reads {
				if r == f.Name {
					return
				}
			}
			ignored = append(ignored, "-"+f.Name)
		}
	})
	if len(ignored) > 0 {
		sort.Strings(ignored)
		return usagef("account: -mechanism %s does not use %s (gaussian is one Gaussian mechanism; dpsgd reads -q or -examples and -batch, and -steps; bandmf reads -examples, -batch, -bands and -steps)", *mech, strings.Join(ignored, ", "))
	}
	if *format != "json" && *format != "table" {
		return usagef("account: -format %q: want json or table", *format)
	}
	if (*sigma > 0) == (*eps > 0) {
		return usagef("account: give exactly one of -sigma > 0 or -epsilon > 0")
	}
	if !(*delta > 0 && *delta < 1) {
		return usagef("account: -delta %v must lie in (0,1)", *delta)
	}
	if *steps <= 0 {
		return usagef("account: -steps %d must be positive", *steps)
	}
	kind, err := privacy.ParseAccountant(*acctName)
	if err != nil {
		return usagef("account: -accountant %q: want pld or rdp", *acctName)
	}
	req := privacy.AccountRequest{Kind: privacy.AccountKind(*mech), Q: *q, Examples: *examples, Batch: *batch, Bands: *bands,
		Steps: *steps, Sigma: *sigma, Epsilon: *eps, Delta: *delta, Accountant: kind}
	if *mech == "dpsgd" {
		if *q == 0 && (*examples <= 0 || *batch <= 0) {
			return usagef("account: dpsgd needs -q or -examples and -batch")
		}
		if *q != 0 && (*examples != 0 || *batch != 0) {
			return usagef("account: dpsgd takes -q or -examples and -batch, not both")
		}
	}
	if *mech == "bandmf" && (*examples <= 0 || *batch <= 0) {
		return usagef("account: bandmf needs -examples and -batch")
	}
	ans, err := privacy.Account(context.Background(), req)
	var refused *privacy.Refusal
	if errors.As(err, &refused) && refused.Rule == privacy.RuleBands {
		return usagef("account: -bands: %s", refused.Reason)
	}
	if err != nil {
		return err
	}
	res := accountResult{Mechanism: *mech, Delta: *delta, Accountant: ans.Accountant, Sigma: ans.Sigma,
		Epsilon: dpcore.Epsilon(ans.Epsilon), Calibrated: ans.Calibrated, Compositions: ans.Compositions}
	if ans.Composition.Amplified {
		rate := ans.Composition.Rate()
		res.Q = &rate
	}
	if *mech == "bandmf" {
		res.Bands = bands
	}
	switch *format {
	case "json":
		return json.NewEncoder(stdout).Encode(res)
	default:
		epsText := fmt.Sprintf("epsilon %.6g", float64(res.Epsilon))
		if res.Epsilon.Infinite() {
			epsText = "epsilon = " + res.Epsilon.String()
		}
		fmt.Fprintf(stdout, "mechanism %s  sigma %.6g  %s  delta %.3g  accountant %s  compositions %d", res.Mechanism, res.Sigma, epsText, res.Delta, res.Accountant, res.Compositions)
		if res.Q != nil {
			fmt.Fprintf(stdout, "  q %.6g", *res.Q)
		}
		if res.Bands != nil {
			fmt.Fprintf(stdout, "  bands %d", *res.Bands)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}
