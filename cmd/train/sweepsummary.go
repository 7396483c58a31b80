package main

// The summary of train sweep: mean, min and max accuracy per (mechanism,
// sampling, epsilon) over the runs of the results file, as CSV and
// Markdown, and accuracy against epsilon drawn with one line per
// (mechanism, sampling).

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/internal/accplot"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"gonum.org/v1/plot/vg"
)

// summaryRow is one (mechanism, sampling, epsilon) of the summary.
type summaryRow struct {
	Mechanism, Sampling string
	Epsilon             float64
	Split               string
	Accuracies          []float64 // fractions, one per run
	Refused             []string  // errors of refused runs
	Chosen              []string  // the mechanisms the plans built (an auto mechanism's choice)
	ClaimEps, Delta     float64   // the largest epsilon claimed by a run, and its delta
	Seconds             float64   // total training time
}

func (r summaryRow) line() string { return r.Mechanism + ", " + r.Sampling }

// summarize groups the run records into rows, sorted by mechanism,
// sampling and epsilon.
func summarize(records []sweepRecord) []summaryRow {
	idx := map[string]*summaryRow{}
	var keys []string
	for _, rec := range records {
		c := rec.Cell
		if rec.Kind != "run" || c == nil {
			continue
		}
		k := fmt.Sprintf("%s|%s|%g", c.Mechanism, c.Sampling, c.Epsilon)
		row := idx[k]
		if row == nil {
			row = &summaryRow{Mechanism: c.Mechanism, Sampling: c.samplingLabel(), Epsilon: c.Epsilon}
			idx[k] = row
			keys = append(keys, k)
		}
		row.Seconds += rec.Seconds
		if rec.Error != "" || rec.Result == nil {
			row.Refused = appendNew(row.Refused, rec.Error)
			continue
		}
		res := rec.Result
		row.Accuracies = append(row.Accuracies, res.Final.Accuracy)
		row.Split = res.Final.Split
		if p := res.Plan; p != nil {
			row.Chosen = appendNew(row.Chosen, p.Mechanism)
			if p.Epsilon > row.ClaimEps {
				row.ClaimEps, row.Delta = p.Epsilon, p.Delta
			}
		}
	}
	rows := make([]summaryRow, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, *idx[k])
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Mechanism != b.Mechanism {
			return a.Mechanism < b.Mechanism
		}
		if a.Sampling != b.Sampling {
			return a.Sampling < b.Sampling
		}
		return a.Epsilon < b.Epsilon
	})
	return rows
}

var summaryHeader = []string{"mechanism", "sampling", "epsilon", "runs", "split", "accuracy_mean", "accuracy_min", "accuracy_max", "claimed_epsilon", "delta", "plan_mechanisms", "refused", "seconds"}

// cells is the row's CSV fields (accuracies as fractions, 4 decimals).
func (r summaryRow) cells() []string {
	mean, lo, hi := accplot.Summary(r.Accuracies)
	f := func(v float64) string {
		if len(r.Accuracies) == 0 {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	claim := ""
	if r.ClaimEps > 0 {
		claim = strconv.FormatFloat(r.ClaimEps, 'g', 4, 64)
	}
	delta := ""
	if r.Delta > 0 {
		delta = strconv.FormatFloat(r.Delta, 'g', 3, 64)
	}
	return []string{r.Mechanism, r.Sampling, strconv.FormatFloat(r.Epsilon, 'g', -1, 64), strconv.Itoa(len(r.Accuracies)), r.Split,
		f(mean), f(lo), f(hi), claim, delta, strings.Join(r.Chosen, " "), strings.Join(r.Refused, "; "), strconv.FormatFloat(r.Seconds, 'f', 1, 64)}
}

func writeSummaryCSV(w io.Writer, rows []summaryRow) error {
	cw := csv.NewWriter(w)
	cw.Write(summaryHeader)
	for _, r := range rows {
		cw.Write(r.cells())
	}
	cw.Flush()
	return cw.Error()
}

func writeSummaryMarkdown(w io.Writer, title string, rows []summaryRow) {
	fmt.Fprintf(w, "# %s\n\n", title)
	fmt.Fprintln(w, "| mechanism | sampling | epsilon | runs | accuracy mean | min | max | claimed (epsilon, delta) | plan | seconds |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---|---|---:|")
	for _, r := range rows {
		c := r.cells()
		acc := "–"
		lo, hi := "–", "–"
		if len(r.Accuracies) > 0 {
			mean, l, h := accplot.Summary(r.Accuracies)
			acc, lo, hi = fmt.Sprintf("%.2f%%", 100*mean), fmt.Sprintf("%.2f%%", 100*l), fmt.Sprintf("%.2f%%", 100*h)
		}
		claim := "–"
		if r.ClaimEps > 0 {
			claim = fmt.Sprintf("(%s, %s)", c[8], c[9])
		}
		plan := c[10]
		if len(r.Refused) > 0 {
			plan = strings.TrimSpace(plan + " refused: " + c[11])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", r.Mechanism, r.Sampling, c[2], len(r.Accuracies), acc, lo, hi, claim, plan, c[12])
	}
	split := "test"
	for _, r := range rows {
		if r.Split != "" {
			split = r.Split
			break
		}
	}
	fmt.Fprintf(w, "\nAccuracy on the %s split at the end of each run; mean, min and max over the runs of each row.", split)
	if split == "validation" {
		fmt.Fprint(w, " Not private: measured without noise on examples held out of the training data (train sweep -select tunes privately).")
	}
	fmt.Fprintln(w)
}

// writeSummary writes summary.csv, summary.md and the plot; for a
// selection, only the selections' results (the runs' accuracies are not
// released).
func (s *sweep) writeSummary() error {
	rows := summarize(s.log.records)
	title := fmt.Sprintf("train sweep: %s, model %s", s.source, s.r.model)
	var csvBuf, mdBuf bytes.Buffer
	if s.sel != nil {
		if err := writeSelectionSummary(&csvBuf, &mdBuf, title, s.selections); err != nil {
			return err
		}
	} else {
		if err := writeSummaryCSV(&csvBuf, rows); err != nil {
			return err
		}
		writeSummaryMarkdown(&mdBuf, title, rows)
	}
	for name, b := range map[string][]byte{"summary.csv": csvBuf.Bytes(), "summary.md": mdBuf.Bytes()} {
		if err := atomicfile.WriteFile(filepath.Join(s.dir, name), b); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
	}
	if s.sel != nil {
		fmt.Fprintf(s.stdout, "sweep: %s, %s\n", filepath.Join(s.dir, "summary.md"), filepath.Join(s.dir, "summary.csv"))
		return nil
	}
	if err := s.writePlot(title, rows); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "sweep: %s, %s, %s\n", filepath.Join(s.dir, "summary.md"), filepath.Join(s.dir, "summary.csv"), filepath.Join(s.dir, "accuracy.png"))
	return nil
}

// writeSelectionSummary writes the selections' results: per target
// epsilon, the runs drawn, the selected candidate, its noisy score and
// the selection's (epsilon, delta).
func writeSelectionSummary(csvw, md io.Writer, title string, out selectionOutput) error {
	sels := out.Selections
	cw := csv.NewWriter(csvw)
	cw.Write([]string{"target_epsilon", "runs", "law", "selected_mechanism", "selected_sampling", "plan_mechanism", "noisy_validation_accuracy", "selection_epsilon", "delta", "model_file"})
	fmt.Fprintf(md, "# %s: private selection\n\n", title)
	fmt.Fprintln(md, "| target epsilon of each run | runs drawn | selected | noisy validation accuracy | (epsilon, delta) of the selection | model |")
	fmt.Fprintln(md, "|---:|---:|---|---:|---|---|")
	for _, r := range sels {
		mech, samp, plan, score := "", "", "", ""
		if r.Selected != nil {
			mech, samp, plan = r.Selected.Mechanism, r.Selected.samplingLabel(), r.Mechanism
			score = strconv.FormatFloat(r.Score, 'f', 4, 64)
		}
		eps, delta := strconv.FormatFloat(r.Claim.Epsilon, 'g', 4, 64), strconv.FormatFloat(r.Claim.Delta, 'g', 3, 64)
		cw.Write([]string{strconv.FormatFloat(r.Epsilon, 'g', -1, 64), strconv.Itoa(r.K), r.Repetitions.String(), mech, samp, plan, score, eps, delta, r.ModelFile})
		sel := "nothing (no run drawn)"
		if r.Selected != nil {
			sel = fmt.Sprintf("%s, %s (plan: %s)", mech, samp, plan)
			score = fmt.Sprintf("%.2f%%", 100*r.Score)
		}
		fmt.Fprintf(md, "| %g | %d | %s | %s | (%s, %s) | %s |\n", r.Epsilon, r.K, sel, score, eps, delta, filepath.Base(r.ModelFile))
	}
	if out.All != nil {
		fmt.Fprintf(md, "\nEach row's (epsilon, delta) covers that row alone; releasing all %d rows together: (%.4g, %.3g).\n", len(sels), out.All.Epsilon, out.All.Delta)
	}
	fmt.Fprintln(md, "\nEach selection drew its number of runs and each run's (mechanism, sampling) before any run, and compared the runs by their validation accuracy with Gaussian noise; its (epsilon, delta) covers what this table shows and the selected model (selection.json states the rule and the assumptions; train eval -model-file gives the model's test accuracy). The runs' own accuracies in runs.jsonl are not covered: keep that file as private as the data.")
	cw.Flush()
	return cw.Error()
}

// writePlot draws accuracy against epsilon, one line per (mechanism,
// sampling), with the -marks.
func (s *sweep) writePlot(title string, rows []summaryRow) error {
	lines := accplot.Lines{}
	split := "test"
	for _, r := range rows {
		for _, a := range r.Accuracies {
			lines.Add(r.line(), r.Epsilon, 100*a)
			split = r.Split
		}
	}
	p, err := accplot.New(title, split+" accuracy (%)", lines, s.marks)
	if err != nil {
		return fmt.Errorf("sweep: plot: %w", err)
	}
	for _, ext := range []string{"png", "svg"} {
		wt, err := p.WriterTo(8*vg.Inch, 5.5*vg.Inch, ext)
		if err != nil {
			return fmt.Errorf("sweep: plot: %w", err)
		}
		if err := atomicfile.Write(filepath.Join(s.dir, "accuracy."+ext), func(w io.Writer) error {
			_, err := wt.WriteTo(w)
			return err
		}); err != nil {
			return fmt.Errorf("sweep: plot: %w", err)
		}
	}
	return nil
}
