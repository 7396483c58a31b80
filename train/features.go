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
	"strings"
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
func featureShape(train *data.Dataset, f Features) ([3]int, error) {
	shape := shapeOf(train)
	if f != FeaturesScatter {
		return shape, nil
	}
	sc, err := scattering(train.Shape)
	if err != nil {
		return shape, err
	}
	return sc.OutShape(shape[0]), nil
}

// FeaturesProgress is where the computing of a data set's features
// stands (Config.OnFeatures).
type FeaturesProgress struct {
	// Set names the data set; Done of its Total examples are transformed.
	Set         string
	Done, Total int
	// Elapsed is the time spent on this data set so far.
	Elapsed time.Duration
}

// featuresBlock is how many examples are transformed between two
// Config.OnFeatures calls (about a second on two cores).
const featuresBlock = 1024

// featurizer computes a transform's features of data sets, reading and
// writing them in a cache directory ("" for none), and records what it
// did for the log line.
type featurizer struct {
	sc       *models.Scattering
	dir      string
	progress func(FeaturesProgress) // nil: none
	// transform computes the features of n examples src into dst;
	// tests replace it to count the examples transformed.
	transform func(ctx context.Context, dst, src []float32, n, c int) error
	block     int // examples a transform call (featuresBlock)
	done      []FeaturesDone
}

// FeaturesDone is how a run got one data set's features (Result.Features):
// computed or read from the cache, and the time it took.
type FeaturesDone struct {
	Set      string  `json:"set"`
	Examples int     `json:"examples"`
	Cached   bool    `json:"cached"`
	Seconds  float64 `json:"seconds"`
}

func newFeaturizer(sc *models.Scattering, dir string, progress func(FeaturesProgress)) *featurizer {
	return &featurizer{sc: sc, dir: dir, progress: progress, block: featuresBlock, transform: func(ctx context.Context, dst, src []float32, n, c int) error {
		return sc.TransformBatch(ctx, dst, src, n, c, runtime.GOMAXPROCS(0))
	}}
}

// apply replaces every non-nil *sets[i] by its features.
func (fz *featurizer) apply(ctx context.Context, sets []**data.Dataset) error {
	// How many examples of each parent the sets read.
	covered := map[*data.Dataset]int{}
	for _, p := range sets {
		if *p != nil {
			parent, _ := (*p).Parent()
			covered[parent] += (*p).Len()
		}
	}
	computed := map[*data.Dataset]*data.Dataset{}
	for _, p := range sets {
		d := *p
		if d == nil {
			continue
		}
		parent, lo := d.Parent()
		if 2*covered[parent] < parent.Len() {
			parent, lo = d, 0
		}
		f := computed[parent]
		if f == nil {
			var err error
			if f, err = fz.cached(ctx, parent); err != nil {
				return err
			}
			computed[parent] = f
		}
		v, err := f.Slice(lo, lo+d.Len())
		if err != nil {
			return fmt.Errorf("train: features: %w", err)
		}
		v.Name = d.Name + " (scattering features)"
		*p = v
	}
	return nil
}

// summary is the log line of what apply did: for each data set, whether
// its features were computed or read from the cache, and in how long.
func (fz *featurizer) summary() string {
	var parts []string
	for _, d := range fz.done {
		how := fmt.Sprintf("computed in %.1fs", d.Seconds)
		switch {
		case d.Cached:
			how = fmt.Sprintf("read from the cache %s in %.1fs", fz.dir, d.Seconds)
		case fz.dir != "":
			how += ", stored in the cache " + fz.dir
		default:
			how += " (no cache)"
		}
		parts = append(parts, fmt.Sprintf("%s (%d examples) %s", d.Set, d.Examples, how))
	}
	return fmt.Sprintf("features: %v of %s", fz.sc, strings.Join(parts, "; "))
}

func scatterDataset(ctx context.Context, sc *models.Scattering, d *data.Dataset) (*data.Dataset, error) {
	return newFeaturizer(sc, "", nil).compute(ctx, d)
}

// compute transforms d's examples, a block at a time, reporting progress.
func (fz *featurizer) compute(ctx context.Context, d *data.Dataset) (*data.Dataset, error) {
	x, err := fz.alloc(d)
	if err != nil {
		return nil, err
	}
	return fz.computeInto(ctx, x, d)
}

// alloc checks d's shape against the transform's and makes the buffer of
// its features.
func (fz *featurizer) alloc(d *data.Dataset) ([]float32, error) {
	sc := fz.sc
	if d.Shape.H != sc.H || d.Shape.W != sc.W {
		return nil, invalidf("scattering features: %s has %v examples, the training data %dx%d", d.Name, d.Shape, sc.H, sc.W)
	}
	out := sc.OutShape(d.Shape.C)
	per := out[0] * out[1] * out[2]
	if need := int64(d.Len()) * int64(per) * 4; need > 1<<34 {
		return nil, invalidf("scattering features of %s need %d MiB", d.Name, need>>20)
	}
	return make([]float32, d.Len()*per), nil
}

// computeInto is compute into x, which alloc made.
func (fz *featurizer) computeInto(ctx context.Context, x []float32, d *data.Dataset) (*data.Dataset, error) {
	out := fz.sc.OutShape(d.Shape.C)
	per := out[0] * out[1] * out[2]
	in := d.Shape.Size()
	start := time.Now()
	for lo := 0; lo < d.Len(); lo += fz.block {
		hi := min(lo+fz.block, d.Len())
		if err := fz.transform(ctx, x[lo*per:hi*per], d.X[lo*in:hi*in], hi-lo, d.Shape.C); err != nil {
			return nil, fmt.Errorf("train: scattering features of %s: %w", d.Name, err)
		}
		if fz.progress != nil {
			fz.progress(FeaturesProgress{Set: d.Name, Done: hi, Total: d.Len(), Elapsed: time.Since(start)})
		}
	}
	return fz.wrap(x, d, out)
}

// wrap makes the features x of d's examples a Dataset with d's labels,
// owners and name.
func (fz *featurizer) wrap(x []float32, d *data.Dataset, out [3]int) (*data.Dataset, error) {
	f, err := data.NewDataset(x, d.Y, data.Shape{C: out[0], H: out[1], W: out[2]}, d.Classes)
	if err != nil {
		return nil, fmt.Errorf("train: scattering features of %s: %w", d.Name, err)
	}
	f.Name, f.Coarse, f.CoarseClasses, f.Owners = d.Name, d.Coarse, d.CoarseClasses, d.Owners
	return f, nil
}

// The features cache: one sealed file per data set and transform, named by
// the SHA-256 of the transform's parameters and the examples' values.
const (
	featuresMagic   = "dpmf-features"
	featuresVersion = 1
)

// cached returns d's features from the cache when they were computed
// before, else computes them and stores them there. A corrupt or
// mismatched cache file is recomputed and replaced. The file is a function
// of the training data: keep it as private as the data. The features are
// read and written a block at a time: only the features themselves are
// held in memory.
func (fz *featurizer) cached(ctx context.Context, d *data.Dataset) (*data.Dataset, error) {
	start := time.Now()
	record := func(f *data.Dataset, cached bool) (*data.Dataset, error) {
		fz.done = append(fz.done, FeaturesDone{Set: d.Name, Examples: d.Len(), Cached: cached, Seconds: time.Since(start).Seconds()})
		return f, nil
	}
	if fz.dir == "" {
		f, err := fz.compute(ctx, d)
		if err != nil {
			return nil, err
		}
		return record(f, false)
	}
	sc := fz.sc
	h := sha256.New()
	fmt.Fprintf(h, "scatter J=%d L=%d shape=%v n=%d;", sc.J, sc.L, d.Shape, d.Len())
	var buf []byte
	for x := d.X; len(x) > 0; {
		k := min(len(x), 1<<14)
		buf = atomicfile.AppendFloats(buf[:0], x[:k])
		h.Write(buf)
		x = x[k:]
	}
	path := filepath.Join(fz.dir, fmt.Sprintf("features-scatter-%x.bin", h.Sum(nil)[:16]))
	x, err := fz.alloc(d)
	if err != nil {
		return nil, err
	}
	err = atomicfile.ReadSealedFloats(path, featuresMagic, featuresVersion, x)
	if err == nil {
		if f, err := fz.wrap(x, d, sc.OutShape(d.Shape.C)); err == nil {
			f.Name = d.Name + " (cached)"
			return record(f, true)
		}
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, atomicfile.ErrCorrupt) {
		return nil, fmt.Errorf("train: features cache: %w", err)
	}
	// A file that could not be read is recomputed into the same buffer.
	f, err := fz.computeInto(ctx, x, d)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(fz.dir, 0o700); err != nil {
		return nil, fmt.Errorf("train: features cache: %w", err)
	}
	if err := atomicfile.WriteSealedFloats(path, featuresMagic, featuresVersion, f.X); err != nil {
		return nil, fmt.Errorf("train: features cache: %w", err)
	}
	return record(f, false)
}

// ApplyFeatures returns the features f of every example of d (d itself for
// FeaturesPixels), as a run with Data.Features = f computes them: for
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

func shapeOf(d *data.Dataset) [3]int { return [3]int{d.Shape.C, d.Shape.H, d.Shape.W} }
