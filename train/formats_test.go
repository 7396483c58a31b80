package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Files written by the release at commit 3258d09 (testdata/formats): the
// checkpoint and metrics file of formatRunConfig's run interrupted after
// step 13, the result JSON of its resumed run, and the scattering features
// of blobs(50, 3).

// formatRunConfig is faultConfig with the tree-online mechanism: its
// encoder is exact (no optimizer whose last bits a later build may
// change), so the checkpoint resumes with every later build.
func formatRunConfig(t *testing.T, dir string) Config {
	cfg := faultConfig(t, dir)
	cfg.Privacy.Mechanism = parseMech(t, "tree-online")
	return cfg
}

func copyFixture(t *testing.T, name, dst string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "formats", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFormatCheckpointAndMetrics3258d09: the run resumes from the
// checkpoint at step 13 (model, optimizer, sampler, noise state and plan
// inside it), keeps the evaluations the metrics file recorded before the
// interrupt, and ends bit for bit where an uninterrupted run ends.
func TestFormatCheckpointAndMetrics3258d09(t *testing.T) {
	dir := t.TempDir()
	cfg := formatRunConfig(t, dir)
	copyFixture(t, "checkpoint-3258d09.ckpt", cfg.Output.CheckpointPath)
	copyFixture(t, "metrics-3258d09.jsonl", cfg.Output.MetricsPath)
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 13 {
		t.Fatalf("resumed from step %d, want 13", res.Resumed)
	}
	if got := fmt.Sprint(evalSteps(res)); got != "[5 10 15 20 25 30]" {
		t.Fatalf("result evaluations at steps %s, want those of the metrics file too", got)
	}
	checkMetricsFile(t, cfg.Output.MetricsPath, 30, []int{5, 10, 15, 20, 25, 30})
	checkResultFile(t, res)
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	whole := formatRunConfig(t, t.TempDir())
	whole.Output.CheckpointPath, whole.Output.MetricsPath = "", ""
	sameParams(t, tr.Model().Params(), trainToEnd(t, whole), "resumed from the 3258d09 checkpoint")
}

// TestFormatFeatures3258d09: the cached scattering features are used (not
// recomputed) and equal the computed ones.
func TestFormatFeatures3258d09(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	name := "features-scatter-" + formatFeaturesHash + ".bin"
	copyFixture(t, name, filepath.Join(dir, name))
	d := blobs(t, 50, 3)
	sc, err := scattering(d.Shape)
	if err != nil {
		t.Fatal(err)
	}
	want, err := scatterDataset(ctx, sc, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cachedFeatures(ctx, dir, sc, d)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got.Name, "cached") {
		t.Fatalf("%q: the cache file was not used", got.Name)
	}
	if !slices.Equal(got.X, want.X) || !slices.Equal(got.Y, d.Y) || got.Shape != want.Shape {
		t.Fatal("cached features differ from computed ones")
	}
}

// formatFeaturesHash names the features file of blobs(50, 3) (the SHA-256
// of the transform and the pixels): a change of the name is a change of
// format too, since old files would no longer be found.
const formatFeaturesHash = "fb65813d37c6bb476ad302a3113c4bc3"

// checkResultFile: the result JSON (what train run -json wrote at commit
// 3258d09 for this resumed run) decodes into Result, and every key it
// holds has the value the run gives now (the time taken aside).
func checkResultFile(t *testing.T, res *Result) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "formats", "result-3258d09.json"))
	if err != nil {
		t.Fatal(err)
	}
	var old Result
	if err := json.Unmarshal(b, &old); err != nil {
		t.Fatal(err)
	}
	if old.Resumed != 13 || old.Steps != 30 || len(old.Evals) != 6 || old.Plan == nil {
		t.Fatalf("result file: resumed %d, %d steps, %d evaluations, plan %v", old.Resumed, old.Steps, len(old.Evals), old.Plan)
	}
	var file, now map[string]any
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	nb, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(nb, &now)
	for k, v := range file {
		if k != "elapsed_ns" && fmt.Sprint(now[k]) != fmt.Sprint(v) {
			t.Errorf("result %s: file %v, now %v", k, v, now[k])
		}
	}
}

// TestFormatCheckpointWithCache3258d09: a checkpoint of an optimized
// mechanism (faultConfig's bandmf:4, interrupted after step 13) resumes
// with the factorization cache it was built with (testdata/formats/
// bandmf-cache-3258d09, written at commit 3258d09): the cache entry is
// found under the same key and read, not rebuilt, so the noise continues;
// without it a newer optimizer may build another encoder, whose noise
// would not continue the checkpoint's. The run ends bit for bit where an
// uninterrupted run with that cache ends.
func TestFormatCheckpointWithCache3258d09(t *testing.T) {
	src := filepath.Join("testdata", "formats", "bandmf-cache-3258d09")
	dir := t.TempDir()
	cfg := faultConfig(t, dir)
	cfg.Privacy.CacheDir = filepath.Join(dir, "cache")
	if err := os.MkdirAll(cfg.Privacy.CacheDir, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := filepath.Glob(filepath.Join(src, "cache", "*"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("cache fixture: %v %v", entries, err)
	}
	for _, f := range []string{"run.ckpt", "metrics.jsonl", filepath.Join("cache", filepath.Base(entries[0]))} {
		copyFixture(t, filepath.Join("bandmf-cache-3258d09", f), filepath.Join(dir, f))
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != 13 {
		t.Fatalf("resumed from step %d, want 13", res.Resumed)
	}
	// Read, not rebuilt: a rebuild would have replaced the entry.
	was, _ := os.ReadFile(entries[0])
	now, err := os.ReadFile(filepath.Join(cfg.Privacy.CacheDir, filepath.Base(entries[0])))
	if err != nil || !bytes.Equal(now, was) {
		t.Fatalf("the cache entry was rewritten (%v)", err)
	}
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	whole := faultConfig(t, t.TempDir())
	whole.Output.CheckpointPath, whole.Output.MetricsPath, whole.Privacy.CacheDir = "", "", cfg.Privacy.CacheDir
	sameParams(t, tr.Model().Params(), trainToEnd(t, whole), "resumed from the 3258d09 checkpoint with its cache")
}
