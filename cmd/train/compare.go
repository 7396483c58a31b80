package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// compareRow is one JSON object of "train compare"; keys are stable.
type compareRow struct {
	mfnoise.CompareRow
	// Sigma and NoiseRMSE are set with -epsilon: the noise multiplier of
	// one Gaussian mechanism at (epsilon, delta) and RMSE times it.
	Sigma     float64 `json:"sigma,omitempty"`
	NoiseRMSE float64 `json:"noise_rmse,omitempty"`
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("compare", stderr)
	n := fs.Int("n", 0, "number of steps")
	part := fs.String("participation", "single", "single, kb or minsep")
	k := fs.Int("k", 1, "maximum participations (kb, minsep)")
	b := fs.Int("b", 1, "separation between participations (kb, minsep)")
	wl := fs.String("workload", "prefix", "prefix or momentum")
	beta := fs.Float64("momentum", 0.95, "momentum (with -workload momentum)")
	cool := fs.Float64("cooldown", 0, "fraction of steps cooled down linearly to 0.05x (with -workload momentum)")
	mechs := fs.String("mechanisms", "dpsgd,tree-online,tree-full,fft,fft-opt,mf-single", "comma-separated mechanisms (the names of train run -mechanism): "+privacy.MechanismNames())
	var factFiles []string
	fs.Func("factorization", "also score your own factorization from `FILE` (mfnoise.SaveFactorization format), named by its base name; repeatable", func(path string) error {
		factFiles = append(factFiles, path)
		return nil
	})
	format := fs.String("format", "table", "table, json or csv")
	plotFile := fs.String("plot", "", "draw per-step RMSE to this .png or .svg file")
	eps := fs.Float64("epsilon", 0, "if set, calibrate sigma of one Gaussian mechanism at (epsilon, delta) and report the noise RMSE")
	delta := fs.Float64("delta", 1e-6, "delta for -epsilon")
	cache := fs.String("cache", "", "directory caching optimized factorizations")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *n <= 0 {
		return usagef("compare: -n %d must be positive", *n)
	}
	// -epsilon 0 (the default) means no calibration; anything else must be
	// a usable epsilon.
	if *eps != 0 && !(*eps > 0 && !math.IsInf(*eps, 0)) {
		return usagef("compare: -epsilon %v must be positive and finite (or 0 for none)", *eps)
	}
	if *eps != 0 && !(*delta > 0 && *delta < 1) {
		return usagef("compare: -delta %v must lie in (0,1)", *delta)
	}
	if *plotFile != "" {
		if err := checkPlotPath("plot", *plotFile); err != nil {
			return err
		}
	}
	var schema mfnoise.Schema
	var err error
	switch *part {
	case "single":
		schema = mfnoise.SingleParticipation()
	case "kb":
		schema, err = mfnoise.KBParticipation(*k, *b)
	case "minsep":
		schema, err = mfnoise.MinSepParticipation(*k, *b)
	default:
		return usagef("compare: -participation %q: want single, kb or minsep", *part)
	}
	if err != nil {
		return err
	}
	var w mfnoise.Workload
	switch *wl {
	case "prefix":
		w, err = mfnoise.PrefixSum(*n)
	case "momentum":
		w, err = mfnoise.MomentumWorkload(*n, *beta, mfnoise.CooldownSchedule(*n, *cool, 0.05))
	default:
		return usagef("compare: -workload %q: want prefix or momentum", *wl)
	}
	if err != nil {
		return err
	}
	var list []mfnoise.Mechanism
	if *mechs != "" || len(factFiles) == 0 {
		ms, err := privacy.ParseMechanisms(*mechs)
		if err != nil {
			return err
		}
		for _, m := range ms {
			list = append(list, m)
		}
	}
	for _, path := range factFiles {
		m, err := loadFactorization(path)
		if err != nil {
			return err
		}
		list = append(list, m)
	}
	switch *format {
	case "table", "json", "csv":
	default:
		return usagef("compare: -format %q: want table, json or csv", *format)
	}
	var bopt mfnoise.BuildOptions
	if *cache != "" {
		bopt.Cache = &mfnoise.Cache{Dir: *cache}
	}
	// Optimizers report progress on stderr (a bar on a terminal); stdout
	// carries only the table, JSON or CSV.
	bp := newBuildProgress(stderr, time.Second, terminal(stderr))
	rows, err := mfnoise.Compare(bp.Attach(ctx), w, schema, list, bopt)
	if err != nil {
		return err
	}
	bp.Summary(stderr)
	var sigma float64
	if *eps > 0 {
		if sigma, err = accountant.GaussianSigma(*eps, *delta); err != nil {
			return err
		}
	}
	out := make([]compareRow, len(rows))
	for i, r := range rows {
		out[i] = compareRow{CompareRow: r}
		if sigma > 0 {
			out[i].Sigma, out[i].NoiseRMSE = sigma, sigma*r.RMSE
		}
	}
	if *plotFile != "" {
		if err := plotRMSE(*plotFile, out, w, schema); err != nil {
			return err
		}
	}
	switch *format {
	case "json":
		for i := range out {
			out[i].StepRMSE = nil
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "csv":
		// sigma and noise_rmse are columns only with -epsilon (README).
		cw := csv.NewWriter(stdout)
		head := []string{"mechanism", "sensitivity", "sensitivity_exact", "sensitivity_method", "loss", "rmse", "noise_memory_per_coord", "step_time"}
		if sigma > 0 {
			head = append(head, "sigma", "noise_rmse")
		}
		cw.Write(append(head, "build_seconds"))
		for _, r := range out {
			rec := []string{r.Mechanism, fmtF(r.Sensitivity), strconv.FormatBool(r.SensitivityExact), string(r.SensitivityMethod),
				fmtF(r.Loss), fmtF(r.RMSE), fmtF(r.NoiseMemoryPerCoord), r.StepTime}
			if sigma > 0 {
				rec = append(rec, fmtF(r.Sigma), fmtF(r.NoiseRMSE))
			}
			cw.Write(append(rec, fmtF(r.BuildSeconds)))
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "mechanism\tsensitivity\texact\tloss\trmse\tmemory/coord\tstep time\tbuild s\t"
	if sigma > 0 {
		head += "noise rmse\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range out {
		line := fmt.Sprintf("%s\t%.5g\t%v\t%.4g\t%.4g\t%.4g\t%s\t%.3g\t", r.Mechanism, r.Sensitivity, r.SensitivityExact, r.Loss, r.RMSE, r.NoiseMemoryPerCoord, r.StepTime, r.BuildSeconds)
		if sigma > 0 {
			line += fmt.Sprintf("%.4g\t", r.NoiseRMSE)
		}
		fmt.Fprintln(tw, line)
	}
	fmt.Fprintf(tw, "\n%s, %s, unit noise multiplier%s\n", w, realizedSchema(schema, *n), map[bool]string{true: fmt.Sprintf("; noise rmse at sigma %.4g (epsilon %g, delta %g)", sigma, *eps, *delta), false: ""}[sigma > 0])
	return tw.Flush()
}

// loadFactorization reads a caller's factorization for -factorization,
// named by the file's base name; its declared band count (Meta.Bands) is
// verified when it is scored.
func loadFactorization(path string) (privacy.Factorization, error) {
	f, err := os.Open(path)
	if err != nil {
		return privacy.Factorization{}, inputError{fmt.Errorf("compare: -factorization: %w", err)}
	}
	defer f.Close()
	fact, err := mfnoise.LoadFactorization(bufio.NewReader(f))
	if err != nil {
		return privacy.Factorization{}, inputError{fmt.Errorf("compare: -factorization %s: %w", path, err)}
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return privacy.Factorization{Name: name, F: fact, Bands: fact.Meta.Bands}, nil
}

// realizedSchema is the schema as it acts on n steps: a (k,b) or min-sep
// schema allows at most ceil(n/b) participations, so a larger k is reported
// as the k that is realized, with the requested one in parentheses.
func realizedSchema(s mfnoise.Schema, n int) string {
	if s.Kind == mfnoise.Single || s.B <= 0 {
		return s.String()
	}
	k := min(s.K, (n+s.B-1)/s.B)
	if k == s.K {
		return s.String()
	}
	r := s
	r.K = k
	return fmt.Sprintf("%s (requested k=%d: at most ceil(n/b) = %d participations in %d steps)", r, s.K, k, n)
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }

// plotRMSE draws each mechanism's per-step error standard deviation.
func plotRMSE(path string, rows []compareRow, w mfnoise.Workload, s mfnoise.Schema) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return usagef("compare: -plot %q: want a .png or .svg file", path)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("per-step error, %s, %s", w, s)
	p.X.Label.Text = "step"
	p.Y.Label.Text = "RMSE (unit noise multiplier)"
	p.Legend.Top = true
	p.Legend.Left = true
	var lines []any
	for _, r := range rows {
		if len(r.StepRMSE) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(r.StepRMSE))
		for i, v := range r.StepRMSE {
			pts[i].X, pts[i].Y = float64(i+1), v
			if math.IsNaN(v) {
				pts[i].Y = 0
			}
		}
		lines = append(lines, r.Mechanism, pts)
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return fmt.Errorf("compare: plot: %w", err)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("compare: plot: %w", err)
	}
	return nil
}
