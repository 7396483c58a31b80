package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/train"
)

func isInvalid(err error) bool {
	return errors.Is(err, accountant.ErrInvalid) || errors.Is(err, mfnoise.ErrInvalid) || errors.Is(err, train.ErrInvalid) || errors.Is(err, train.ErrRefused)
}

// accountResult is the JSON of "train account"; keys are stable.
type accountResult struct {
	Mechanism    string  `json:"mechanism"`
	Epsilon      float64 `json:"epsilon"`
	Delta        float64 `json:"delta"`
	Sigma        float64 `json:"sigma"`
	Accountant   string  `json:"accountant"`
	Q            float64 `json:"q,omitempty"`
	Compositions int     `json:"compositions"`
	Bands        int     `json:"bands,omitempty"`
	Calibrated   bool    `json:"calibrated"`
}

func runAccount(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("account", stderr)
	mech := fs.String("mechanism", "gaussian", "gaussian (one Gaussian mechanism, e.g. an unamplified MF mechanism with sensitivity 1), dpsgd (Poisson-subsampled), or bandmf (amplified banded MF)")
	sigma := fs.Float64("sigma", 0, "noise multiplier: report epsilon")
	eps := fs.Float64("epsilon", 0, "target epsilon: report the noise multiplier")
	delta := fs.Float64("delta", 1e-5, "delta")
	q := fs.Float64("q", 0, "sampling rate (dpsgd); or give -examples and -batch")
	examples := fs.Int("examples", 0, "number of training examples M")
	batch := fs.Int("batch", 0, "expected batch size B")
	steps := fs.Int("steps", 1, "number of steps T")
	bands := fs.Int("bands", 1, "number of bands (bandmf)")
	acctName := fs.String("accountant", "pld", "pld or rdp")
	format := fs.String("format", "json", "json or table")
	if err := parseFlags(fs, args); err != nil {
		return err
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
	var acct accountant.Accountant
	switch *acctName {
	case "pld":
		acct = accountant.NewPLD(accountant.PLDOptions{})
	case "rdp":
		acct = accountant.NewRDP(nil)
	default:
		return usagef("account: -accountant %q: want pld or rdp", *acctName)
	}
	res := accountResult{Mechanism: *mech, Delta: *delta, Accountant: *acctName}
	var event func(s float64) (accountant.Event, error)
	switch *mech {
	case "gaussian":
		res.Compositions = 1
		event = func(s float64) (accountant.Event, error) { return accountant.UnamplifiedMFEvent(s) }
	case "dpsgd":
		rate := *q
		if rate == 0 {
			if *examples <= 0 || *batch <= 0 {
				return usagef("account: dpsgd needs -q or -examples and -batch")
			}
			rate = float64(*batch) / float64(*examples)
		}
		if !(rate > 0 && rate <= 1) {
			return usagef("account: sampling rate %v must lie in (0,1]", rate)
		}
		res.Q, res.Compositions = rate, *steps
		event = func(s float64) (accountant.Event, error) { return accountant.DPSGDEvent(s, rate, *steps) }
	case "bandmf":
		if *examples <= 0 || *batch <= 0 {
			return usagef("account: bandmf needs -examples and -batch")
		}
		if *bands <= 0 || *bands > *examples {
			return usagef("account: -bands %d must lie in [1, examples]", *bands)
		}
		res.Bands = *bands
		res.Q = float64(*batch) / math.Floor(float64(*examples)/float64(*bands))
		res.Compositions = (*steps + *bands - 1) / *bands
		event = func(s float64) (accountant.Event, error) {
			return accountant.BandMFEvent(s, *examples, *batch, *bands, *steps)
		}
	default:
		return usagef("account: -mechanism %q: want gaussian, dpsgd or bandmf", *mech)
	}
	if *sigma > 0 {
		ev, err := event(*sigma)
		if err != nil {
			return err
		}
		e, err := acct.Epsilon(ev, *delta)
		if err != nil {
			return err
		}
		res.Sigma, res.Epsilon = *sigma, e
	} else {
		cal, err := accountant.Calibrate(acct, event, *eps, *delta)
		if err != nil {
			return err
		}
		res.Sigma, res.Epsilon, res.Calibrated = cal.Sigma, cal.Epsilon, true
	}
	switch *format {
	case "json":
		enc := json.NewEncoder(stdout)
		return enc.Encode(res)
	case "table":
		fmt.Fprintf(stdout, "mechanism %s  sigma %.6g  epsilon %.6g  delta %.3g  accountant %s  compositions %d  q %.6g\n",
			res.Mechanism, res.Sigma, res.Epsilon, res.Delta, res.Accountant, res.Compositions, res.Q)
		return nil
	}
	return usagef("account: -format %q: want json or table", *format)
}

var _ = flag.ErrHelp
