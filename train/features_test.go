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
	cfg.Train, cfg.Test = quadrants(t, 1000, 1), quadrants(t, 200, 2)
	cfg.ModelName, cfg.Steps, cfg.EMA, cfg.LearningRate, cfg.ClipNorm = "scatternet", 30, 0.9, 2, 0.5
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
		"augment":      func(c *Config) { c.ModelName, c.Augment = "scatternet", true },
		"unknown":      func(c *Config) { c.Features = "wavelets" },
		"ema 1":        func(c *Config) { c.EMA = 1 },
		"ema negative": func(c *Config) { c.EMA = -0.5 },
		"tiny for J = 2": func(c *Config) {
			c.Features = FeaturesScatter
			c.Train = blobs(t, 100, 1)
			c.Train.Shape.H, c.Train.Shape.W = 2, 8
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
