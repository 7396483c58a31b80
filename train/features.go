package train

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/dpmf-go/dpmf/internal/atomicfile"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
)

// Features names a fixed per-example transform applied to every example
// (training and test) before the model sees it.
type Features string

const (
	// FeaturesPixels feeds the examples as they are.
	FeaturesPixels Features = ""
	// FeaturesScatter feeds the scattering transform of each example
	// (models.Scattering, J = 2, L = 8: 81 channels per input channel at a
	// quarter of the resolution), the ScatterNet features of Tramèr and
	// Boneh (2021). It has no parameters and reads one example at a time,
	// so it costs no privacy; the ledger lists it.
	FeaturesScatter Features = "scatter"
)

// Scattering parameters of FeaturesScatter (Tramèr and Boneh's).
const (
	scatterJ = 2
	scatterL = 8
)

func (f Features) valid() bool { return f == FeaturesPixels || f == FeaturesScatter }

// scattering is the transform of FeaturesScatter for d's shape.
func scattering(s data.Shape) (*models.Scattering, error) {
	sc, err := models.NewScattering(s.H, s.W, scatterJ, scatterL)
	if err != nil {
		return nil, invalidf("scattering features of %v examples: %v", s, err)
	}
	return sc, nil
}

// featureShape is the shape the model sees for cfg's data.
func featureShape(cfg *Config) ([3]int, error) {
	shape := shapeOf(cfg.Train)
	if cfg.Features != FeaturesScatter {
		return shape, nil
	}
	sc, err := scattering(cfg.Train.Shape)
	if err != nil {
		return shape, err
	}
	return sc.OutShape(shape[0]), nil
}

// preprocessing describes cfg's per-example transform for the ledger.
func preprocessing(cfg *Config) []string {
	if cfg.Features != FeaturesScatter {
		return augmentationNote(cfg)
	}
	return append(augmentationNote(cfg), fmt.Sprintf("scattering transform (Morlet wavelets, J = %d, L = %d; no parameters) of every example", scatterJ, scatterL))
}

// applyFeatures replaces cfg.Train and cfg.Test by their features.
func applyFeatures(ctx context.Context, cfg *Config) error {
	if cfg.Features != FeaturesScatter {
		return nil
	}
	sc, err := scattering(cfg.Train.Shape)
	if err != nil {
		return err
	}
	start := time.Now()
	for _, p := range []**data.Dataset{&cfg.Train, &cfg.Test} {
		if *p == nil {
			continue
		}
		if *p, err = cachedFeatures(ctx, cfg.CacheDir, sc, *p); err != nil {
			return err
		}
	}
	if cfg.Log != nil {
		how := "computed"
		if cfg.CacheDir != "" {
			how = "computed or read from the cache " + cfg.CacheDir + ","
		}
		fmt.Fprintf(cfg.Log, "features: %v, %s in %.1fs\n", sc, how, time.Since(start).Seconds())
	}
	return nil
}

func scatterDataset(ctx context.Context, sc *models.Scattering, d *data.Dataset) (*data.Dataset, error) {
	if d.Shape.H != sc.H || d.Shape.W != sc.W {
		return nil, invalidf("scattering features: %s has %v examples, the training data %dx%d", d.Name, d.Shape, sc.H, sc.W)
	}
	out := sc.OutShape(d.Shape.C)
	per := out[0] * out[1] * out[2]
	if need := int64(d.Len()) * int64(per) * 4; need > 1<<34 {
		return nil, invalidf("scattering features of %s need %d MiB", d.Name, need>>20)
	}
	x := make([]float32, d.Len()*per)
	if err := sc.TransformBatch(ctx, x, d.X, d.Len(), d.Shape.C, runtime.GOMAXPROCS(0)); err != nil {
		return nil, fmt.Errorf("train: scattering features of %s: %w", d.Name, err)
	}
	f, err := data.NewDataset(x, d.Y, data.Shape{C: out[0], H: out[1], W: out[2]}, d.Classes)
	if err != nil {
		return nil, fmt.Errorf("train: scattering features of %s: %w", d.Name, err)
	}
	f.Name = d.Name + " (scattering features)"
	return f, nil
}

// The features cache: one sealed file per data set and transform, named by
// the SHA-256 of the transform's parameters and the examples' values.
const (
	featuresMagic   = "dpmf-features"
	featuresVersion = 1
)

// cachedFeatures returns d's features from dir when they were computed
// before, else computes them and stores them there (dir "": no cache). A
// corrupt or mismatched cache file is recomputed and replaced. The file is
// a function of the training data: keep it as private as the data.
func cachedFeatures(ctx context.Context, dir string, sc *models.Scattering, d *data.Dataset) (*data.Dataset, error) {
	if dir == "" {
		return scatterDataset(ctx, sc, d)
	}
	h := sha256.New()
	fmt.Fprintf(h, "scatter J=%d L=%d shape=%v n=%d;", sc.J, sc.L, d.Shape, d.Len())
	var buf []byte
	for x := d.X; len(x) > 0; {
		k := min(len(x), 1<<14)
		buf = atomicfile.AppendFloats(buf[:0], x[:k])
		h.Write(buf)
		x = x[k:]
	}
	path := filepath.Join(dir, fmt.Sprintf("features-scatter-%x.bin", h.Sum(nil)[:16]))
	out := sc.OutShape(d.Shape.C)
	per := out[0] * out[1] * out[2]
	payload, err := atomicfile.ReadSealed(path, featuresMagic, featuresVersion)
	if err == nil && len(payload) == 4*per*d.Len() {
		x, _ := atomicfile.DecodeFloats[float32](payload, per*d.Len())
		f, err := data.NewDataset(x, d.Y, data.Shape{C: out[0], H: out[1], W: out[2]}, d.Classes)
		if err == nil {
			f.Name = d.Name + " (scattering features, cached)"
			return f, nil
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, atomicfile.ErrCorrupt) {
		return nil, fmt.Errorf("train: features cache: %w", err)
	}
	f, err := scatterDataset(ctx, sc, d)
	if err != nil {
		return nil, err
	}
	payload = atomicfile.AppendFloats(make([]byte, 0, 4*len(f.X)), f.X)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("train: features cache: %w", err)
	}
	if err := atomicfile.WriteSealed(path, featuresMagic, featuresVersion, payload); err != nil {
		return nil, fmt.Errorf("train: features cache: %w", err)
	}
	return f, nil
}

// ApplyFeatures returns the features f of every example of d (d itself for
// FeaturesPixels), as a run with Config.Features = f computes them: for
// evaluating a saved model on new examples.
func ApplyFeatures(ctx context.Context, f Features, d *data.Dataset) (*data.Dataset, error) {
	switch f {
	case FeaturesPixels:
		return d, nil
	case FeaturesScatter:
		sc, err := scattering(d.Shape)
		if err != nil {
			return nil, err
		}
		return scatterDataset(ctx, sc, d)
	}
	return nil, invalidf("features %q: want scatter or none", f)
}

// InputShape is the shape of the examples whose features f have shape
// feat: what callers of a saved model feed it. For FeaturesScatter the
// scattering's subsampling by 2^J is undone and the shape checked by
// transforming it again; a shape no example maps to is refused.
func InputShape(f Features, feat [3]int) ([3]int, error) {
	switch f {
	case FeaturesPixels:
		return feat, nil
	case FeaturesScatter:
		in := data.Shape{H: feat[1] << scatterJ, W: feat[2] << scatterJ}
		sc, err := scattering(in)
		if err == nil && feat[0]%sc.Channels() == 0 {
			in.C = feat[0] / sc.Channels()
			if sc.OutShape(in.C) == feat {
				return [3]int{in.C, in.H, in.W}, nil
			}
		}
		return [3]int{}, invalidf("features %q of shape %v: no input shape gives them", f, feat)
	}
	return [3]int{}, invalidf("features %q: want scatter or none", f)
}
