package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/train"
)

// tinySweep is a grid of 2 samplings x 2 epsilons of DP-SGD on the
// embedded data, runs of 4 steps; with -seeds 2 (tinyGrid), 8 runs.
func tinySweep(dir string, extra ...string) []string {
	return append([]string{"-data", "embedded", "-model", "logistic", "-steps", "4", "-batch", "200", "-train-examples", "1000",
		"-mechanisms", "dpsgd", "-samplings", "fixed-order,shuffle", "-epsilons", "2,8",
		"-out", dir, "-cache", ""}, extra...)
}

// runLines reads the run records of runs.jsonl.
func tinyGrid(dir string) []string { return tinySweep(dir, "-seeds", "2") }

func runLines(t *testing.T, dir string) []sweepRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "runs.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []sweepRecord
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var r sweepRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if r.Kind == "run" {
			out = append(out, r)
		}
	}
	return out
}

// TestSweepResumesWithoutRerunning: a sweep cancelled in the middle of
// its fourth run resumes with the five runs left (the interrupted one
// from its checkpoint), a torn last line is dropped and its run redone,
// and every cell ends in the file once.
func TestSweepResumesWithoutRerunning(t *testing.T) {
	dir := t.TempDir()
	s, err := parseSweep(tinyGrid(dir), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.configure = func(cfg *train.Config) {
		if s.ran == 3 { // the fourth run: cancel after its second step
			cfg.Output.OnStep = func(sm train.StepMetrics) {
				if sm.Step == 2 {
					cancel()
				}
			}
		}
	}
	err = s.run(ctx)
	if !errors.Is(err, train.ErrInterrupted) {
		t.Fatalf("cancelled sweep: err %v, want ErrInterrupted", err)
	}
	if s.ran != 4 || len(runLines(t, dir)) != 3 {
		t.Fatalf("cancelled sweep: %d runs started, %d recorded; want 4 and 3", s.ran, len(runLines(t, dir)))
	}
	var out bytes.Buffer
	s2, err := parseSweep(tinyGrid(dir), &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s2.ran != 5 {
		t.Fatalf("resumed sweep ran %d runs, want 5 (8 cells, 3 done)", s2.ran)
	}
	if !strings.Contains(out.String(), "3 already in") {
		t.Errorf("resume does not say what it kept: %q", out.String())
	}
	recs := runLines(t, dir)
	seen := map[string]int{}
	resumed := 0
	for _, r := range recs {
		seen[r.Cell.key()]++
		if r.Result == nil || r.Error != "" {
			t.Fatalf("run %v failed: %s", r.Cell, r.Error)
		}
		if r.Result.Resumed > 0 {
			resumed++
		}
	}
	if len(recs) != 8 || len(seen) != 8 {
		t.Fatalf("%d run lines over %d cells, want 8 and 8", len(recs), len(seen))
	}
	if resumed != 1 {
		t.Errorf("%d runs resumed from a checkpoint, want 1 (the interrupted one)", resumed)
	}

	// A kill while a line was written leaves it torn: it is dropped and
	// its run redone, nothing else.
	path := filepath.Join(dir, "runs.jsonl")
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	last := lines[len(lines)-1]
	torn := strings.Join(lines[:len(lines)-1], "") + last[:len(last)/2]
	if err := os.WriteFile(path, []byte(torn), 0o644); err != nil {
		t.Fatal(err)
	}
	s3, err := parseSweep(tinyGrid(dir), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s3.ran != 1 || len(runLines(t, dir)) != 8 {
		t.Fatalf("after a torn line: %d runs, %d lines; want 1 and 8", s3.ran, len(runLines(t, dir)))
	}

	// The summary agrees with the runs: mean, min and max per row.
	checkSummaryCSV(t, dir, runLines(t, dir))
	for _, name := range []string{"summary.md", "accuracy.png", "accuracy.svg"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoints")); !os.IsNotExist(err) {
		t.Errorf("checkpoints left behind: %v", err)
	}

	// A line that does not parse with lines after it is corruption.
	b, _ = os.ReadFile(path)
	bad := strings.Replace(string(b), "\n", "\nnot json\n", 1)
	os.WriteFile(path, []byte(bad), 0o644)
	if code, _, stderr := runCLI(t, append([]string{"sweep"}, tinyGrid(dir)...)...); code != exitUsage || !strings.Contains(stderr, "corrupt") {
		t.Errorf("corrupt results file: exit %d, %q", code, stderr)
	}
}

// checkSummaryCSV recomputes each row's mean, min and max from the runs.
func checkSummaryCSV(t *testing.T, dir string, recs []sweepRecord) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "summary.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 { // header + 2 samplings x 2 epsilons
		t.Fatalf("%d summary rows, want 5", len(rows))
	}
	for _, row := range rows[1:] {
		var accs []float64
		for _, r := range recs {
			if r.Cell.Mechanism == row[0] && r.Cell.samplingLabel() == row[1] && strconv.FormatFloat(r.Cell.Epsilon, 'g', -1, 64) == row[2] {
				accs = append(accs, r.Result.Final.Accuracy)
			}
		}
		if len(accs) != 2 || row[3] != "2" {
			t.Fatalf("row %v: %d runs", row, len(accs))
		}
		want := []float64{(accs[0] + accs[1]) / 2, math.Min(accs[0], accs[1]), math.Max(accs[0], accs[1])}
		for i, w := range want {
			got, _ := strconv.ParseFloat(row[5+i], 64)
			if math.Abs(got-w) > 5e-5 {
				t.Errorf("row %v column %s: %v, want %.4f", row[:3], summaryHeader[5+i], got, w)
			}
		}
	}
}

// TestSummaryStatistics: mean, min and max per (mechanism, sampling,
// epsilon), refused runs counted apart.
func TestSummaryStatistics(t *testing.T) {
	rec := func(m string, eps, acc float64) sweepRecord {
		return sweepRecord{Kind: "run", Cell: &sweepCell{Mechanism: m, Sampling: "shuffle", Epsilon: eps},
			Result: &train.Result{Final: train.EvalMetrics{Split: "test", Accuracy: acc}}}
	}
	recs := []sweepRecord{rec("b", 1, 0.5), rec("a", 1, 0.9), rec("b", 1, 0.7), rec("b", 1, 0.9), rec("b", 3, 0.8),
		{Kind: "run", Cell: &sweepCell{Mechanism: "b", Sampling: "shuffle", Epsilon: 1, Seed: 9}, Error: "refused"}}
	rows := summarize(recs)
	if len(rows) != 3 || rows[0].Mechanism != "a" || rows[1].Epsilon != 1 || rows[2].Epsilon != 3 {
		t.Fatalf("rows %+v", rows)
	}
	c := rows[1].cells()
	if c[3] != "3" || c[5] != "0.7000" || c[6] != "0.5000" || c[7] != "0.9000" || c[11] != "refused" {
		t.Errorf("row b, eps 1: %v", c)
	}
}

// TestSweepRefusesBadInput: one line, exit 2, before any run.
func TestSweepRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{tinySweep(dir, "-mechanism", "dpsgd"), "use -mechanisms"},
		{tinySweep(dir, "-epsilons", "1,x"), "-epsilons"},
		{tinySweep(dir, "-samplings", "bogus"), "-samplings"},
		{tinySweep(dir, "-mechanisms", "nope"), "-mechanisms"},
		{tinySweep(dir, "-seeds", "0"), "-seeds"},
		{tinySweep(dir, "-select", "2", "-validation", "100", "-seeds", "2"), "-seeds"},
		{tinySweep(""), "-out"},
		{tinySweep(dir, "-select", "3"), "needs -validation"},
		{tinySweep(dir, "-select", "0.5", "-validation", "100"), "-select"},
		{tinySweep(dir, "-select", "-2", "-validation", "100"), "-select"},
		{tinySweep(dir, "-select", "0", "-validation", "100"), "-select"},
		{tinySweep(dir, "-select", "2", "-validation", "100", "-select-law", "x"), "-select-law"},
		{tinySweep(dir, "-select", "2", "-validation", "100", "-samplings", "poisson,random-allocation"), "-select with random-allocation sampling: the selection composes the candidates' Renyi"},
		{tinySweep(dir, "-select", "2", "-validation", "100", "-mechanisms", "toeplitz:2", "-samplings", "band-allocation"), "-select with band-allocation sampling"},
		{tinySweep(dir, "-seed", "1"), "bits"},
		{tinySweep(dir, "-validation", "100000"), "-validation"},
		{tinySweep(dir, "-marks", filepath.Join(dir, "missing.json")), "-marks"},
	} {
		code, _, stderr := runCLI(t, append([]string{"sweep"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "runs.jsonl")); !os.IsNotExist(err) {
		t.Errorf("bad input created the results file: %v", err)
	}
	fresh := filepath.Join(dir, "fresh")
	if code, _, _ := runCLI(t, append([]string{"sweep"}, tinySweep(fresh, "-seeds", "0")...)...); code != exitUsage {
		t.Errorf("-seeds 0: exit %d", code)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("bad input created -out: %v", err)
	}
	// A candidate the planner refuses stops a selection before any run.
	code, _, stderr := runCLI(t, append([]string{"sweep"}, tinySweep(t.TempDir(), "-select", "2", "-validation", "100", "-mechanisms", "bandmf:auto", "-samplings", "poisson")...)...)
	if code != exitUsage || !strings.Contains(stderr, "train: sweep: -select: candidate bandmf:auto, poisson") {
		t.Errorf("refused candidate: exit %d, %q", code, stderr)
	}
	// A resumed sweep with another recipe is refused.
	if code, _, stderr := runCLI(t, append([]string{"sweep"}, tinySweep(dir, "-epsilons", "8", "-samplings", "shuffle")...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI(t, append([]string{"sweep"}, tinySweep(dir, "-steps", "5")...)...)
	if code != exitUsage || !strings.Contains(stderr, `-steps "5" (was "4")`) {
		t.Errorf("other recipe: exit %d, %q", code, stderr)
	}
}

// TestSweepSelection: a private selection draws K and its candidates once
// (a resumed sweep runs the same draws and no run twice), scores on the
// validation split, and claims the epsilon of accountant.SelectionEpsilon
// over every candidate's event and the score's noise.
func TestSweepSelection(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sweep", "-data", "embedded", "-model", "logistic", "-steps", "4", "-batch", "200", "-train-examples", "1000",
		"-validation", "500", "-mechanisms", "dpsgd,toeplitz:2", "-samplings", "fixed-order", "-epsilons", "2",
		"-select", "3", "-select-law", "poisson", "-seed", strings.Repeat("0123456789abcdef", 4), "-out", dir, "-cache", ""}
	code, out, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "selection.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res selectionOutput
	if err := json.Unmarshal(b, &res); err != nil || len(res.Selections) != 1 || res.All != nil {
		t.Fatalf("selection.json: %v %s", err, b)
	}
	r := res.Selections[0]
	s, err := parseSweep(args[1:], io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.recordedSelection(2)
	s.log.close()
	if err != nil || d == nil {
		t.Fatalf("recorded selection: %v", err)
	}
	t.Logf("K = %d runs drawn", d.K)
	if d.K != r.K || len(d.Draws) != d.K || len(runLines(t, dir)) != d.K {
		t.Fatalf("K %d, %d draws, %d runs, result K %d", d.K, len(d.Draws), len(runLines(t, dir)), r.K)
	}
	events := []accountant.Event{accountant.Gaussian(scoreSigma(10))}
	for _, raw := range d.Events {
		e, err := accountant.UnmarshalEvent(raw)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	want, err := accountant.SelectionEpsilon(events, accountant.PoissonRepetitions(3), 1e-5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Claim.Epsilon != want || r.Claim.Delta != 1e-5 || !(want > 2) {
		t.Errorf("claim (%v, %v), want (%v, 1e-5) above the runs' 2", r.Claim.Epsilon, r.Claim.Delta, want)
	}
	best := math.Inf(-1)
	for _, rec := range runLines(t, dir) {
		if rec.Score == nil || rec.NoisyCount == nil || rec.Result.Final.Split != train.SplitValidation {
			t.Fatalf("selection run %v: score %v, split %s", rec.Cell, rec.Score, rec.Result.Final.Split)
		}
		if *rec.Score != float64(*rec.NoisyCount)/500 {
			t.Errorf("score %v is not the noisy count %d over 500", *rec.Score, *rec.NoisyCount)
		}
		best = math.Max(best, *rec.Score)
	}
	if d.K > 0 && (r.Selected == nil || r.Score != best) {
		t.Errorf("selected %v with score %v, want the best score %v", r.Selected, r.Score, best)
	}
	if !strings.Contains(out, "privacy of the selection") && d.K > 0 {
		t.Errorf("stdout does not state the selection's claim: %q", out)
	}
	// The selected model carries the selection's claim; the other runs'
	// models are gone.
	if d.K > 0 {
		tr, err := models.ReadFile(r.ModelFile)
		if err != nil {
			t.Fatal(err)
		}
		if p := tr.Metadata.Privacy; p.Epsilon != r.Claim.Epsilon || p.Delta != r.Claim.Delta {
			t.Errorf("selected model claims (%v, %v), the selection (%v, %v)", p.Epsilon, p.Delta, r.Claim.Epsilon, r.Claim.Delta)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "models")); !os.IsNotExist(err) {
		t.Errorf("the runs' models are left behind: %v", err)
	}
	// Run again: the same draws, no run.
	s2, err := parseSweep(args[1:], io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s2.ran != 0 {
		t.Errorf("a finished selection ran %d runs again", s2.ran)
	}
}

// TestSweepKill9Resumes: a sweep killed with SIGKILL (the test binary
// re-executed as the program) resumes with exactly the runs its results
// file does not hold, whatever line the kill landed in.
func TestSweepKill9Resumes(t *testing.T) {
	dir := t.TempDir()
	args := append([]string{"sweep"}, tinySweep(dir, "-epsilons", "8", "-seeds", "4")...)
	enc, _ := json.Marshal(args)
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), cliChildEnv+"="+string(enc))
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(filepath.Join(dir, "runs.jsonl"))
		if bytes.Count(b, []byte(`"kind":"run"`)) >= 2 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	c.Process.Kill()
	c.Wait()
	b, _ := os.ReadFile(filepath.Join(dir, "runs.jsonl"))
	kept := 0
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		var r sweepRecord
		if bytes.HasSuffix(line, []byte("\n")) && json.Unmarshal(line, &r) == nil && r.Kind == "run" {
			kept++
		}
	}
	if kept < 2 || kept == 8 {
		t.Fatalf("killed with %d runs recorded; want the kill mid-sweep (stderr %s)", kept, stderr.String())
	}
	s, err := parseSweep(args[1:], io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.ran != 8-kept {
		t.Errorf("resume ran %d runs; %d of 8 were recorded", s.ran, kept)
	}
	seen := map[string]bool{}
	for _, r := range runLines(t, dir) {
		if seen[r.Cell.key()] {
			t.Errorf("cell %v recorded twice", r.Cell)
		}
		seen[r.Cell.key()] = true
	}
	if len(seen) != 8 {
		t.Errorf("%d cells recorded, want 8", len(seen))
	}
}

// TestSweepLogLocked: a second sweep on the same -out is refused while
// the first holds its results file (two appenders lose records).
func TestSweepLogLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runs.jsonl")
	l, err := openSweepLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if l2, err := openSweepLog(path); err == nil || !strings.Contains(err.Error(), "in use by another train sweep") {
		if l2 != nil {
			l2.close()
		}
		t.Fatalf("second open: %v, want refused", err)
	}
	l.close()
	l3, err := openSweepLog(path)
	if err != nil {
		t.Fatalf("after close: %v", err)
	}
	l3.close()
}

// A results file written before a flag existed resumes when the flag keeps
// its default (the old runs had its default behaviour) and is refused when
// it does not.
func TestSweepResumesAcrossNewFlag(t *testing.T) {
	dir := t.TempDir()
	args := append([]string{"sweep"}, tinySweep(dir, "-epsilons", "8", "-samplings", "shuffle")...)
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	path := filepath.Join(dir, "runs.jsonl")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(b), "\n", 2)
	var head sweepRecord
	if err := json.Unmarshal([]byte(lines[0]), &head); err != nil {
		t.Fatal(err)
	}
	if _, ok := head.Recipe["warmup"]; !ok {
		t.Fatalf("recipe %v has no warmup", head.Recipe)
	}
	delete(head.Recipe, "warmup") // as an older build wrote it
	hb, err := json.Marshal(head)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(append(hb, '\n'), lines[1]...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, args...)
	if code != 0 || !strings.Contains(out, "1 already in") {
		t.Fatalf("resume with the new flag at its default: exit %d, %q, %q", code, out, stderr)
	}
	code, _, stderr = runCLI(t, append(args, "-warmup", "1")...)
	if code != exitUsage || !strings.Contains(stderr, `-warmup "1" (was "")`) {
		t.Errorf("resume with the new flag set: exit %d, %q", code, stderr)
	}
}
