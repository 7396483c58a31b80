package train

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
)

// quadrants is a 4-class problem on 1x8x8 inputs: class c has mean +1 on
// quadrant c, which the 2x2 scattering output (J = 2) keeps apart.
func quadrants(t testing.TB, m int, seed uint64) *data.Dataset {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 9))
	x := make([]float32, m*64)
	y := make([]int, m)
	for i := range m {
		c := i % 4
		y[i] = c
		for p := range 64 {
			v := 0.3 * r.NormFloat64()
			if (p/8)/4*2+(p%8)/4 == c {
				v++
			}
			x[i*64+p] = float32(v)
		}
	}
	ds, err := data.NewDataset(x, y, data.Shape{C: 1, H: 8, W: 8}, 4)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestScatterNetRun trains the scatternet model from a Config alone: the
// features are computed for both splits, the model reads them, and the
// plan's ledger states the transform.
func TestScatterNetRun(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Data.Train, cfg.Data.Test = quadrants(t, 1000, 1), quadrants(t, 200, 2)
	cfg.Model.Name, cfg.Privacy.Steps, cfg.Optimizer.EMA, cfg.Optimizer.LearningRate, cfg.Privacy.ClipNorm = "scatternet", 30, &EMA{Decay: 0.9}, 2, 0.5
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != "scatternet" {
		t.Errorf("model %q", res.Model)
	}
	led := strings.Join(res.Plan.Assumptions(), "\n")
	if !strings.Contains(led, "scattering transform (Morlet wavelets, J = 2, L = 8; no parameters)") {
		t.Errorf("the ledger does not state the features: %s", led)
	}
	if res.Final.Accuracy < 0.6 {
		t.Errorf("accuracy %.3f on separable blobs", res.Final.Accuracy)
	}
	m, err := NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.InputShape() != [3]int{81, 2, 2} {
		t.Errorf("model input %v, want 81 channels of 2x2", m.InputShape())
	}
}

func TestFeaturesRefusals(t *testing.T) {
	for name, edit := range map[string]func(*Config){
		"augment":      func(c *Config) { c.Model.Name, c.Data.Augment = "scatternet", &Augmentation{} },
		"unknown":      func(c *Config) { c.Data.Features = "wavelets" },
		"ema 1":        func(c *Config) { c.Optimizer.EMA = &EMA{Decay: 1} },
		"ema negative": func(c *Config) { c.Optimizer.EMA = &EMA{Decay: -0.5} },
		"tiny for J = 2": func(c *Config) {
			c.Data.Features = FeaturesScatter
			c.Data.Train = blobs(t, 100, 1)
			c.Data.Train.Shape.H, c.Data.Train.Shape.W = 2, 8
		},
	} {
		cfg := baseConfig(t)
		edit(&cfg)
		_, err := New(context.Background(), cfg)
		if !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: got %v, want dpcore.ErrInvalid", name, err)
		}
	}
}

// TestFeaturesCache checks that cached features equal computed ones, that a
// second run reads them, and that a corrupt cache file is recomputed.
func TestFeaturesCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := blobs(t, 50, 3)
	sc, err := scattering(d.Shape)
	if err != nil {
		t.Fatal(err)
	}
	want, err := scatterDataset(ctx, sc, d)
	if err != nil {
		t.Fatal(err)
	}
	first, err := cachedFeatures(ctx, dir, sc, d)
	if err != nil {
		t.Fatal(err)
	}
	second, err := cachedFeatures(ctx, dir, sc, d)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first.X, want.X) || !slices.Equal(second.X, want.X) || !slices.Equal(second.Y, d.Y) {
		t.Fatal("cached features differ from computed ones")
	}
	if !strings.Contains(second.Name, "cached") {
		t.Errorf("second read %q was not served from the cache", second.Name)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "features-scatter-*.bin"))
	if len(files) != 1 {
		t.Fatalf("cache files %v", files)
	}
	b, _ := os.ReadFile(files[0])
	b[len(b)-1] ^= 1
	os.WriteFile(files[0], b, 0o600)
	third, err := cachedFeatures(ctx, dir, sc, d)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(third.X, want.X) || strings.Contains(third.Name, "cached") {
		t.Fatal("a corrupt cache file was not recomputed")
	}
	// Other pixels, other file.
	d2 := blobs(t, 50, 4)
	if _, err := cachedFeatures(ctx, dir, sc, d2); err != nil {
		t.Fatal(err)
	}
	if files, _ = filepath.Glob(filepath.Join(dir, "features-scatter-*.bin")); len(files) != 2 {
		t.Fatalf("two data sets share a cache file: %v", files)
	}
}

// countingFeaturizer is newFeaturizer whose transform counts the calls
// and the examples it transforms.
func countingFeaturizer(t *testing.T, dir string, calls, examples *int) *featurizer {
	t.Helper()
	sc, err := scattering(data.Shape{C: 1, H: 8, W: 8})
	if err != nil {
		t.Fatal(err)
	}
	fz := newFeaturizer(sc, dir, nil)
	fz.block = 16
	inner := fz.transform
	fz.transform = func(ctx context.Context, dst, src []float32, n, c int) error {
		*calls++
		*examples += n
		return inner(ctx, dst, src, n, c)
	}
	return fz
}

// TestFeaturesOnceForAllSplits: the training and held-out parts of one
// training split (-validation, views made by data.Dataset.Slice) are
// served from features computed once for the whole split, equal to those
// computed part by part; a second run reads them from the cache and
// transforms nothing, even with another split point; a small part
// (-train-examples) is computed alone; the log line says which was done.
func TestFeaturesOnceForAllSplits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	root := quadrants(t, 2*16+8, 5) // three blocks
	root.Name = "quadrants"
	split := func(keep int) []**data.Dataset {
		tr, err := root.Slice(0, keep)
		if err != nil {
			t.Fatal(err)
		}
		va, err := root.Slice(keep, root.Len())
		if err != nil {
			t.Fatal(err)
		}
		va.Name = "held out"
		return []**data.Dataset{&tr, &va}
	}
	var calls, examples int
	fz := countingFeaturizer(t, dir, &calls, &examples)
	sets := split(root.Len() - 10)
	if err := fz.apply(ctx, sets); err != nil {
		t.Fatal(err)
	}
	if examples != root.Len() || calls != 3 {
		t.Fatalf("%d calls transformed %d examples, want 3 calls (one a block) and the %d examples once", calls, examples, root.Len())
	}
	// The features equal those of each part computed alone, and are
	// views of one buffer.
	for i, lohi := range [][2]int{{0, root.Len() - 10}, {root.Len() - 10, root.Len()}} {
		part, err := root.Subset(seq(lohi[0], lohi[1]))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ApplyFeatures(ctx, FeaturesScatter, part)
		if err != nil {
			t.Fatal(err)
		}
		got := *sets[i]
		if !slices.Equal(got.X, want.X) || !slices.Equal(got.Y, part.Y) {
			t.Fatalf("part %d: features differ from those computed alone", i)
		}
	}
	if p0, _ := (*sets[0]).Parent(); p0 != func() *data.Dataset { p, _ := (*sets[1]).Parent(); return p }() {
		t.Error("the two parts' features are not views of one buffer")
	}
	line := fz.summary()
	for _, want := range []string{"quadrants (40 examples) computed in", "stored in the cache " + dir} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q does not say %q", line, want)
		}
	}
	if strings.Contains(line, "read from") {
		t.Errorf("log line %q says features were read", line)
	}

	// Another split point: read from the cache, nothing transformed.
	calls, examples = 0, 0
	fz = countingFeaturizer(t, dir, &calls, &examples)
	if err := fz.apply(ctx, split(root.Len()-20)); err != nil {
		t.Fatal(err)
	}
	if calls != 0 {
		t.Fatalf("second split: %d calls transformed %d examples, want none (cached)", calls, examples)
	}
	if line := fz.summary(); !strings.Contains(line, "quadrants (40 examples) read from the cache "+dir+" in") || strings.Contains(line, "computed") {
		t.Errorf("log line %q does not say the features were read from the cache", line)
	}

	// A part of less than half the split is computed alone.
	calls, examples = 0, 0
	fz = countingFeaturizer(t, "", &calls, &examples)
	small, err := root.Slice(0, 12)
	if err != nil {
		t.Fatal(err)
	}
	if err := fz.apply(ctx, []**data.Dataset{&small}); err != nil {
		t.Fatal(err)
	}
	if examples != 12 {
		t.Fatalf("a part of 12 examples: %d examples transformed", examples)
	}
	if line := fz.summary(); !strings.Contains(line, "(12 examples) computed in") || !strings.Contains(line, "(no cache)") {
		t.Errorf("log line %q", line)
	}
}

func seq(lo, hi int) []int {
	s := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// cachedFeatures returns d's features from dir when they were computed
// before, else computes them and stores them there (dir "": no cache).
func cachedFeatures(ctx context.Context, dir string, sc *models.Scattering, d *data.Dataset) (*data.Dataset, error) {
	return newFeaturizer(sc, dir, nil).cached(ctx, d)
}
