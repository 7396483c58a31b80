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

	"github.com/dpmf-go/dpmf/dpcore"
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

// compareOptions are the flags of "train compare".
type compareOptions struct {
	n, k, b          int
	part, wl         string
	beta, cool       float64
	mechs            string
	factFiles        []string
	format, plotFile string
	plotScale        axisScale
	eps, delta       float64
	cache            string
}

// runCompare scores mechanisms on one workload and schema: it parses and
// checks the flags, builds the schema, the workload and the list of
// mechanisms, scores them (mfnoise.Compare), asks the planner for the
// noise multiplier at -epsilon, draws the plot and writes the table, JSON
// or CSV.
func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseCompareFlags(args, stderr)
	if err != nil {
		return err
	}
	schema, err := o.schema()
	if err != nil {
		return err
	}
	w, err := o.workload()
	if err != nil {
		return err
	}
	list, err := o.mechanisms()
	if err != nil {
		return err
	}
	switch o.format {
	case "table", "json", "csv":
	default:
		return usagef("compare: -format %q: want table, json or csv", o.format)
	}
	rows, err := o.score(ctx, w, schema, list, stderr)
	if err != nil {
		return err
	}
	sigma, err := o.noiseMultiplier()
	if err != nil {
		return err
	}
	out := make([]compareRow, len(rows))
	for i, r := range rows {
		out[i] = compareRow{CompareRow: r}
		if sigma > 0 {
			out[i].Sigma, out[i].NoiseRMSE = sigma, sigma*r.RMSE
		}
	}
	if o.plotFile != "" {
		if err := plotRMSE(o.plotFile, out, w, schema, o.plotScale); err != nil {
			return err
		}
	}
	switch o.format {
	case "json":
		return writeCompareJSON(stdout, out)
	case "csv":
		return writeCompareCSV(stdout, out, sigma)
	}
	return o.writeTable(stdout, out, w, schema, sigma)
}

// parseCompareFlags parses and checks the flags of "train compare".
func parseCompareFlags(args []string, stderr io.Writer) (*compareOptions, error) {
	o := &compareOptions{}
	fs := newFlags("compare", stderr)
	fs.IntVar(&o.n, "n", 0, "number of steps")
	fs.StringVar(&o.part, "participation", "single", "single, kb or minsep")
	fs.IntVar(&o.k, "k", 1, "maximum participations (kb, minsep)")
	fs.IntVar(&o.b, "b", 1, "separation between participations (kb, minsep)")
	fs.StringVar(&o.wl, "workload", "prefix", "prefix or momentum")
	fs.Float64Var(&o.beta, "momentum", 0.95, "momentum (with -workload momentum)")
	fs.Float64Var(&o.cool, "cooldown", 0, "fraction of steps cooled down linearly to 0.05x (with -workload momentum)")
	fs.StringVar(&o.mechs, "mechanisms", "dpsgd,tree-online,tree-full,fft,fft-opt,mf-single", "comma-separated mechanisms (the names of train run -mechanism): "+privacy.MechanismNames())
	fs.Func("factorization", "also score your own factorization from `FILE` (mfnoise.SaveFactorization format), named by its base name; repeatable", func(path string) error {
		o.factFiles = append(o.factFiles, path)
		return nil
	})
	fs.StringVar(&o.format, "format", "table", "table, json or csv")
	fs.StringVar(&o.plotFile, "plot", "", "draw per-step RMSE to this .png or .svg file")
	fs.Func("plot-scale", "y axis of -plot: auto (logarithmic when the RMSEs span more than 1.5 decades), linear or log", func(v string) (err error) {
		o.plotScale, err = parseAxisScale(v)
		return err
	})
	fs.Float64Var(&o.eps, "epsilon", 0, "if set, calibrate sigma of one Gaussian mechanism at (epsilon, delta) and report the noise RMSE")
	fs.Float64Var(&o.delta, "delta", 1e-6, "delta for -epsilon")
	fs.StringVar(&o.cache, "cache", defaultCacheDir(), "directory caching optimized factorizations (\"\": none)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if o.n <= 0 {
		return nil, usagef("compare: -n %d must be positive", o.n)
	}
	// -epsilon 0 (the default) means no calibration; anything else must be
	// a usable epsilon.
	if o.eps != 0 && !(o.eps > 0 && !math.IsInf(o.eps, 0)) {
		return nil, usagef("compare: -epsilon %v must be positive and finite (or 0 for none)", o.eps)
	}
	if o.eps != 0 && !(o.delta > 0 && o.delta < 1) {
		return nil, usagef("compare: -delta %v must lie in (0,1)", o.delta)
	}
	if o.plotFile != "" {
		if err := checkPlotPath("plot", o.plotFile); err != nil {
			return nil, err
		}
	}
	if err := checkCacheDir(o.cache); err != nil {
		return nil, err
	}
	return o, nil
}

// schema is the participation schema of -participation, -k and -b.
func (o *compareOptions) schema() (dpcore.Schema, error) {
	switch o.part {
	case "single":
		return dpcore.SingleParticipation(), nil
	case "kb":
		return dpcore.KBParticipation(o.k, o.b)
	case "minsep":
		return dpcore.MinSepParticipation(o.k, o.b)
	}
	return dpcore.Schema{}, usagef("compare: -participation %q: want single, kb or minsep", o.part)
}

// workload is the workload of -workload over -n steps.
func (o *compareOptions) workload() (dpcore.Workload, error) {
	switch o.wl {
	case "prefix":
		return dpcore.PrefixSum(o.n)
	case "momentum":
		return dpcore.MomentumWorkload(o.n, o.beta, dpcore.CooldownSchedule(o.n, o.cool, 0.05))
	}
	return dpcore.Workload{}, usagef("compare: -workload %q: want prefix or momentum", o.wl)
}

// mechanisms are the mechanisms of -mechanisms (parsed by the planner)
// and the factorizations of -factorization.
func (o *compareOptions) mechanisms() ([]mfnoise.Mechanism, error) {
	var list []mfnoise.Mechanism
	if o.mechs != "" || len(o.factFiles) == 0 {
		ms, err := privacy.ParseMechanisms(o.mechs)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			list = append(list, m)
		}
	}
	for _, path := range o.factFiles {
		m, err := loadFactorization(path)
		if err != nil {
			return nil, err
		}
		list = append(list, m)
	}
	return list, nil
}

// score builds and scores the mechanisms. Optimizers report progress on
// stderr (a bar on a terminal); stdout carries only the table, JSON or
// CSV.
func (o *compareOptions) score(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, list []mfnoise.Mechanism, stderr io.Writer) ([]mfnoise.CompareRow, error) {
	var bopt mfnoise.BuildOptions
	if o.cache != "" {
		bopt.Cache = &mfnoise.Cache{Dir: o.cache}
	}
	bp := newBuildProgress(stderr, time.Second, terminal(stderr))
	rows, err := mfnoise.Compare(bp.Attach(ctx), w, schema, list, bopt)
	if err != nil {
		return nil, err
	}
	bp.Summary(stderr)
	return rows, nil
}

// noiseMultiplier is the planner's noise multiplier of one Gaussian
// mechanism of sensitivity 1 at (-epsilon, -delta), or 0 without
// -epsilon.
func (o *compareOptions) noiseMultiplier() (float64, error) {
	if !(o.eps > 0) {
		return 0, nil
	}
	return privacy.GaussianSigma(o.eps, o.delta)
}

func writeCompareJSON(stdout io.Writer, out []compareRow) error {
	for i := range out {
		out[i].StepRMSE = nil
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeCompareCSV writes the rows as CSV; sigma and noise_rmse are
// columns only with -epsilon (README).
func writeCompareCSV(stdout io.Writer, out []compareRow, sigma float64) error {
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

// writeTable writes the rows as an aligned table with a footer naming the
// workload, the realized schema and the noise multiplier.
func (o *compareOptions) writeTable(stdout io.Writer, out []compareRow, w dpcore.Workload, schema dpcore.Schema, sigma float64) error {
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
	noise := ""
	if sigma > 0 {
		noise = fmt.Sprintf("; noise rmse at sigma %.4g (epsilon %g, delta %g)", sigma, o.eps, o.delta)
	}
	fmt.Fprintf(tw, "\n%s, %s, unit noise multiplier%s\n", w, realizedSchema(schema, o.n), noise)
	return tw.Flush()
}

// loadFactorization reads a caller's factorization for -factorization,
// named by the file's base name; its declared band count (Meta.Bands) is
// verified when it is scored.
func loadFactorization(path string) (privacy.CustomFactorization, error) {
	f, err := os.Open(path)
	if err != nil {
		return privacy.CustomFactorization{}, inputError{fmt.Errorf("compare: -factorization: %w", err)}
	}
	defer f.Close()
	fact, err := mfnoise.LoadFactorization(bufio.NewReader(f))
	if err != nil {
		return privacy.CustomFactorization{}, inputError{fmt.Errorf("compare: -factorization %s: %w", path, err)}
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return privacy.CustomFactorization{Name: name, F: fact, Bands: fact.Meta.Bands}, nil
}

// realizedSchema is the schema as it acts on n steps: a (k,b) or min-sep
// schema allows at most ceil(n/b) participations, so a larger k is reported
// as the k that is realized, with the requested one in parentheses.
func realizedSchema(s dpcore.Schema, n int) string {
	if s.Kind == dpcore.Single || s.B <= 0 {
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
func plotRMSE(path string, rows []compareRow, w dpcore.Workload, s dpcore.Schema, scale axisScale) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" {
		return usagef("compare: -plot %q: want a .png or .svg file", path)
	}
	p, err := rmsePlot(rows, w, s, scale)
	if err != nil {
		return err
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("compare: plot: %w", err)
	}
	return nil
}

// rmsePlot is the plot of plotRMSE: linear steps, the RMSE on a
// logarithmic axis when scale says so (DP-SGD's error grows like the
// square root of the step and flattens the factorizations' curves on a
// linear one); a log axis leaves out steps of zero error.
func rmsePlot(rows []compareRow, w dpcore.Workload, s dpcore.Schema, scale axisScale) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("per-step error, %s, %s", w, s)
	p.X.Label.Text = "step"
	p.Y.Label.Text = "RMSE (unit noise multiplier)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.X.Tick.Marker = niceTicks{}
	p.Y.Tick.Marker = niceTicks{}
	var names []string
	var series []plotter.XYs
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
		names, series = append(names, r.Mechanism), append(series, pts)
	}
	logY := logScaled(scale, series)
	var lines []any
	for i, pts := range series {
		if logY {
			pts = positive(pts)
			if len(pts) == 0 {
				continue
			}
		}
		lines = append(lines, names[i], pts)
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, fmt.Errorf("compare: plot: %w", err)
	}
	if logY {
		p.Y.Label.Text += ", log scale"
		setLogY(p)
	}
	return p, nil
}

// positive is the points of pts with a positive finite y.
func positive(pts plotter.XYs) plotter.XYs {
	var out plotter.XYs
	for _, q := range pts {
		if q.Y > 0 && !math.IsInf(q.Y, 0) {
			out = append(out, q)
		}
	}
	return out
}
