package train

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
)

// images is m examples of 1x8x8 pixels in 4 classes, with pixel values of
// magnitude scale (huge values make adversarially large gradients).
func images(t testing.TB, m int, scale float64, seed uint64) *data.Dataset {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 11))
	x := make([]float32, m*64)
	y := make([]int, m)
	for i := range m {
		y[i] = i % 4
		for p := range 64 {
			v := r.NormFloat64()
			if p%4 == y[i] {
				v += 2
			}
			x[i*64+p] = float32(scale * v)
		}
	}
	ds, err := data.NewDataset(x, y, data.Shape{C: 1, H: 8, W: 8}, 4)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func sqNorm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return s
}

// Augmentation multiplicity keeps per-example sensitivity: whatever K and
// however large and aligned the augmented copies' gradients (pixels up to
// 1e6, an MLP whose gradients grow with them), one example's contribution
// to the clipped sum — the mean of its K copies' gradients, clipped — has
// L2 norm at most the clip norm, in the float32 arithmetic the engine does;
// and for examples well inside the norm it is the mean of the copies'
// individual gradients (averaged before clipping, not clipped one by one).
func TestAugmentMultiplicityKeepsSensitivity(t *testing.T) {
	ctx := context.Background()
	for _, k := range []int{1, 2, 3, 4, 8, 16} {
		for _, scale := range []float64{1, 1e3, 1e6} {
			cfg := Config{
				Data:      Data{Train: images(t, 64, scale, uint64(k)), Augment: &Augmentation{Multiplicity: k}},
				Model:     ModelSpec{Name: "mlp", Hidden: []int{16}},
				Privacy:   privacy.Request{Steps: 4, Batch: 16, NoiseMultiplier: 1, ClipNorm: 0.37, Seed: []byte("augment multiplicity"), InsecureSeed: true, Accountant: privacy.RDP},
				Optimizer: Optimizer{LearningRate: 0.1},
			}
			tr, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for step := 1; step <= 3; step++ {
				for i := range 64 {
					st, err := tr.clipChunk(ctx, []int{i}, step)
					if err != nil {
						t.Fatal(err)
					}
					if st.Examples != 1 {
						t.Fatalf("K=%d: stats count %d examples for one", k, st.Examples)
					}
					n := math.Sqrt(sqNorm(tr.chunk))
					if n > cfg.Privacy.ClipNorm {
						t.Fatalf("K=%d, scale %g, step %d, example %d: contribution norm %.17g > clip norm %g", k, scale, step, i, n, cfg.Privacy.ClipNorm)
					}
					worst = max(worst, n)
				}
			}
			// The bound is met with equality (up to the safety margin)
			// when the examples are clipped: the test is not vacuous.
			if scale >= 1e3 && worst < cfg.Privacy.ClipNorm*0.999 {
				t.Fatalf("K=%d, scale %g: largest contribution %v, the examples were not clipped", k, scale, worst)
			}
		}
	}

	// Averaged before clipping: with a clip norm far above every
	// gradient, an example's contribution is the mean of its copies'
	// gradients, each computed alone.
	const k = 4
	cfg := Config{
		Data:      Data{Train: images(t, 32, 1, 9), Augment: &Augmentation{Multiplicity: k}},
		Model:     ModelSpec{Name: "logistic"},
		Privacy:   privacy.Request{Steps: 4, Batch: 8, NoiseMultiplier: 1, ClipNorm: 1e6, Seed: []byte("augment multiplicity mean"), InsecureSeed: true},
		Optimizer: Optimizer{LearningRate: 0.1},
	}
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	eng := tr.engine.(*clip.Engine)
	const i, step = 5, 2
	if _, err := tr.clipChunk(ctx, []int{i}, step); err != nil {
		t.Fatal(err)
	}
	got := append([]float32(nil), tr.chunk...)
	want := make([]float64, len(got))
	one := make([]float32, len(got))
	x := make([]float32, 64)
	distinct := map[string]bool{}
	for j := range k {
		if err := tr.augment.Apply(x, cfg.Data.Train.X[i*64:(i+1)*64], cfg.Data.Train.Shape, step, i*k+j); err != nil {
			t.Fatal(err)
		}
		distinct[string(float32Bytes(x))] = true
		if _, err := eng.ClippedSum(x, []int{cfg.Data.Train.Y[i]}, one); err != nil {
			t.Fatal(err)
		}
		for c, v := range one {
			want[c] += float64(v) / k
		}
	}
	if len(distinct) < 2 {
		t.Fatalf("the %d copies of example %d are all the same image", k, i)
	}
	for c := range got {
		if math.Abs(float64(got[c])-want[c]) > 1e-5*(1+math.Abs(want[c])) {
			t.Fatalf("coordinate %d: contribution %v, mean of the copies' gradients %v", c, got[c], want[c])
		}
	}
}

func float32Bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		u := math.Float32bits(x)
		b = append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return b
}

// K = 1 is the path without multiplicity, bit for bit: a run with
// Augmentation.Multiplicity 1 ends with exactly the parameters of the same
// run with 0 (and without augmentation, the same run twice).
func TestAugmentMultiplicityOneIsThePlainPath(t *testing.T) {
	ctx := context.Background()
	for _, augment := range []bool{false, true} {
		var params [2][]float32
		for c, k := range []int{0, 1} {
			cfg := Config{
				Data:      Data{Train: images(t, 200, 1, 3)},
				Model:     ModelSpec{Name: "mlp", Hidden: []int{8}},
				Privacy:   privacy.Request{Steps: 6, Batch: 40, NoiseMultiplier: 1, ClipNorm: 0.5, Seed: []byte("multiplicity one"), InsecureSeed: true, Accountant: privacy.RDP},
				Optimizer: Optimizer{LearningRate: 0.3},
			}
			if augment {
				cfg.Data.Augment = &Augmentation{Multiplicity: k}
			}
			tr, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for !tr.Done() {
				if _, err := tr.TrainStep(ctx); err != nil {
					t.Fatal(err)
				}
			}
			params[c] = tr.Model().Params()
		}
		for i := range params[0] {
			if math.Float32bits(params[0][i]) != math.Float32bits(params[1][i]) {
				t.Fatalf("augment %v: parameter %d is %v with K=1, %v without multiplicity", augment, i, params[1][i], params[0][i])
			}
		}
	}
}

// What multiplicity cannot do is refused with a sentence, and the ledger
// lists the augmentation.
func TestAugmentMultiplicityRefusalsAndLedger(t *testing.T) {
	ctx := context.Background()
	base := Config{
		Data:    Data{Train: images(t, 200, 1, 3), Augment: &Augmentation{Multiplicity: 4}},
		Model:   ModelSpec{Name: "mlp"},
		Privacy: privacy.Request{Steps: 4, Batch: 40, Epsilon: 4, ClipNorm: 0.5, Seed: []byte("multiplicity refusals"), InsecureSeed: true},
	}
	for _, tc := range []struct {
		name, want string
		edit       func(*Config)
	}{
		{"too many", "want 1 to 64", func(c *Config) { c.Data.Augment = &Augmentation{Multiplicity: 65} }},
		{"non-private", "non-private", func(c *Config) { c.NonPrivate = true }},
		{"per layer", "per-layer", func(c *Config) { c.Model.ClipPerLayer = []float64{1, 1} }},
		{"scattering features", "cached features cannot be reused", func(c *Config) { c.Data.Features = FeaturesScatter }},
	} {
		cfg := base
		tc.edit(&cfg)
		_, err := New(ctx, cfg)
		if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want ErrInvalid saying %q, got %v", tc.name, tc.want, err)
		}
	}
	tr, err := New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range tr.Plan().Assumptions() {
		found = found || strings.Contains(a, "augmentation multiplicity 4")
	}
	if !found {
		t.Fatalf("the ledger does not list the augmentation: %q", tr.Plan().Assumptions())
	}
}
