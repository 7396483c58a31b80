package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/dpmf-go/dpmf/accountant"
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
	switch privacy.AccountKind(mech) {
	case privacy.AccountGaussian:
		return nil, true
	case privacy.AccountDPSGD:
		return []string{"q", "examples", "batch", "steps"}, true
	case privacy.AccountBandMF, privacy.AccountAllocation:
		return []string{"examples", "batch", "steps", "bands"}, true
	}
	return nil, false
}

// runAccount answers "train account": it parses and checks the flags,
// asks the planner (privacy.Account) and writes the answer as JSON or a
// table line.
func runAccount(args []string, stdout, stderr io.Writer) error {
	req, format, err := parseAccountFlags(args, stderr)
	if err != nil {
		return err
	}
	ans, err := privacy.Account(context.Background(), req)
	var refused *privacy.Refusal
	if errors.As(err, &refused) && refused.Rule == privacy.RuleBands {
		return usagef("account: -bands: %s", refused.Reason)
	}
	if errors.Is(err, accountant.ErrUnsupported) && req.Accountant == privacy.PLD {
		// Millions of compositions or extreme rates exceed what the PLD
		// grid holds; RDP has no grid.
		return inputError{fmt.Errorf("%w (-accountant rdp accounts for it, more loosely)", err)}
	}
	if err != nil {
		return err
	}
	res := accountResult{Mechanism: string(req.Kind), Delta: req.Delta, Accountant: ans.Accountant, Sigma: ans.Sigma,
		Epsilon: dpcore.Epsilon(ans.Epsilon), Calibrated: ans.Calibrated, Compositions: ans.Compositions}
	if ans.Composition.Amplified {
		rate := ans.Composition.Rate()
		res.Q = &rate
	}
	if req.Kind == privacy.AccountBandMF || req.Kind == privacy.AccountAllocation {
		res.Bands = &req.Bands
	}
	if format == "json" {
		return json.NewEncoder(stdout).Encode(res)
	}
	writeAccountLine(stdout, res)
	return nil
}

// parseAccountFlags parses the flags of "train account" into the request
// to the planner and the output format, refusing flags the mechanism does
// not read.
func parseAccountFlags(args []string, stderr io.Writer) (privacy.AccountRequest, string, error) {
	var req privacy.AccountRequest
	fs := newFlags("account", stderr)
	mech := fs.String("mechanism", "gaussian", "gaussian (one Gaussian mechanism, e.g. an unamplified MF mechanism with sensitivity 1), dpsgd (Poisson-subsampled), bandmf (amplified banded MF), or allocation (random allocation: dpsgd with -bands 1, banded MF under band allocation)")
	fs.Float64Var(&req.Sigma, "sigma", 0, "noise multiplier: report epsilon")
	fs.Float64Var(&req.Epsilon, "epsilon", 0, "target epsilon: report the noise multiplier")
	fs.Float64Var(&req.Delta, "delta", privacy.DefaultDelta(0), "delta")
	fs.Float64Var(&req.Q, "q", 0, "sampling rate (dpsgd); or give -examples and -batch")
	fs.IntVar(&req.Examples, "examples", 0, "number of training examples M (dpsgd, bandmf, allocation)")
	fs.IntVar(&req.Batch, "batch", 0, "expected batch size B (dpsgd, bandmf, allocation)")
	fs.IntVar(&req.Steps, "steps", 1, "number of steps T (dpsgd, bandmf, allocation)")
	fs.IntVar(&req.Bands, "bands", 1, "number of bands (bandmf, allocation)")
	acctName := fs.String("accountant", "pld", "pld or rdp")
	format := fs.String("format", "json", "json or table")
	if err := parseFlags(fs, args); err != nil {
		return req, "", err
	}
	if err := refuseExplicitZero(fs, map[string]string{"q": "want a sampling rate in (0,1] (omit -q to derive it from -examples and -batch)"}); err != nil {
		return req, "", err
	}
	req.Kind = privacy.AccountKind(*mech)
	if err := checkAccountFlagsRead(fs, *mech); err != nil {
		return req, "", err
	}
	if *format != "json" && *format != "table" {
		return req, "", usagef("account: -format %q: want json or table", *format)
	}
	if (req.Sigma > 0) == (req.Epsilon > 0) {
		return req, "", usagef("account: give exactly one of -sigma > 0 or -epsilon > 0")
	}
	if !(req.Delta > 0 && req.Delta < 1) {
		return req, "", usagef("account: -delta %v must lie in (0,1)", req.Delta)
	}
	if req.Steps <= 0 {
		return req, "", usagef("account: -steps %d must be positive", req.Steps)
	}
	kind, err := privacy.ParseAccountant(*acctName)
	if err != nil {
		return req, "", usagef("account: -accountant %q: want pld or rdp", *acctName)
	}
	req.Accountant = kind
	if req.Kind == privacy.AccountAllocation && kind != privacy.PLD {
		return req, "", usagef("account: -mechanism allocation is accounted by -accountant pld only")
	}
	return req, *format, checkAccountData(req)
}

// checkAccountFlagsRead refuses a -mechanism other than gaussian, dpsgd,
// bandmf and allocation, and the flags given that it does not read.
func checkAccountFlagsRead(fs *flag.FlagSet, mech string) error {
	reads, ok := accountFlags(mech)
	if !ok {
		return usagef("account: -mechanism %q: want gaussian, dpsgd, bandmf or allocation", mech)
	}
	var ignored []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "q", "examples", "batch", "steps", "bands":
			if !slices.Contains(reads, f.Name) {
				ignored = append(ignored, "-"+f.Name)
			}
		}
	})
	if len(ignored) > 0 {
		sort.Strings(ignored)
		return usagef("account: -mechanism %s does not use %s (gaussian is one Gaussian mechanism; dpsgd reads -q or -examples and -batch, and -steps; bandmf and allocation read -examples, -batch, -bands and -steps)", mech, strings.Join(ignored, ", "))
	}
	return nil
}

// checkAccountData refuses a request that lacks the data sizes its
// mechanism is accounted with, or gives both a rate and sizes.
func checkAccountData(req privacy.AccountRequest) error {
	switch req.Kind {
	case privacy.AccountDPSGD:
		if req.Q == 0 && (req.Examples <= 0 || req.Batch <= 0) {
			return usagef("account: dpsgd needs -q or -examples and -batch")
		}
		if req.Q != 0 && (req.Examples != 0 || req.Batch != 0) {
			return usagef("account: dpsgd takes -q or -examples and -batch, not both")
		}
	case privacy.AccountBandMF, privacy.AccountAllocation:
		if req.Examples <= 0 || req.Batch <= 0 {
			return usagef("account: %s needs -examples and -batch", req.Kind)
		}
	}
	return nil
}

// writeAccountLine writes the answer as one table line.
func writeAccountLine(stdout io.Writer, res accountResult) {
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
