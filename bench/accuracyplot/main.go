// Command accuracyplot draws test accuracy against epsilon, one line per
// noise mechanism (mean over runs, bars from min to max), from the -json
// results of train run, with published results (-marks) marked. It writes
// OUT.png and OUT.svg. train sweep draws the same picture of its grid.
//
//	go run ./bench/accuracyplot -out docs/fashion-accuracy results/*.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/dpmf-go/dpmf/internal/accplot"
	"gonum.org/v1/plot/vg"
)

// result is the part of a train run -json file the plot reads.
type result struct {
	Plan *struct {
		Mechanism string  `json:"mechanism"`
		Epsilon   float64 `json:"epsilon"`
		// BandSelection is set when the planner chose the bands
		// (bandmf:auto, toeplitz:auto).
		BandSelection *json.RawMessage `json:"band_selection"`
	} `json:"plan"`
	Final struct {
		Split    string  `json:"split"`
		Accuracy float64 `json:"test_accuracy"`
	} `json:"final"`
}

func main() {
	out := flag.String("out", "fashion-accuracy", "output path without extension (.png and .svg are written)")
	marks := flag.String("marks", "configs/fashion-marks.json", "published results to mark (JSON array of {label, epsilon, accuracy}; empty: none)")
	flag.Parse()
	if err := run(*out, *marks, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "accuracyplot:", err)
		os.Exit(1)
	}
}

func run(out, marksPath string, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("no result files")
	}
	accs, err := readAccuracies(files)
	if err != nil {
		return err
	}
	var marks []accplot.Mark
	if marksPath != "" {
		if marks, err = accplot.ReadMarks(marksPath); err != nil {
			return err
		}
	}
	p, err := accplot.New("Fashion-MNIST, delta = 1e-5: test accuracy against epsilon", "test accuracy (%)", accs, marks)
	if err != nil {
		return err
	}
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(8*vg.Inch, 5.5*vg.Inch, out+ext); err != nil {
			return err
		}
	}
	return nil
}

// readAccuracies reads the result files: accs[mechanism][rounded epsilon]
// are the runs' test accuracies in percent.
func readAccuracies(files []string) (accplot.Lines, error) {
	accs := accplot.Lines{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		if r.Plan == nil || r.Final.Split != "test" {
			return nil, fmt.Errorf("%s: not a private run evaluated on the test split", f)
		}
		eps := math.Round(r.Plan.Epsilon*100) / 100
		mech := lineName(r.Plan.Mechanism, r.Plan.BandSelection != nil)
		accs.Add(mech, eps, 100*r.Final.Accuracy)
	}
	return accs, nil
}

// lineName is the line a run belongs to: its mechanism, or KIND:auto for a
// run whose planner chose the bands (bandmf:auto picks bandmf:4 at one
// epsilon and bandmf:8 at another; they are one line).
func lineName(mech string, auto bool) string {
	if !auto {
		return mech
	}
	if i := strings.IndexByte(mech, ':'); i >= 0 {
		return mech[:i] + ":auto"
	}
	// One band: the planner chose DP-SGD.
	return "bandmf:auto"
}
