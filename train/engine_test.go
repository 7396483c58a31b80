package train

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
)

// fakeBackend is a Backend whose engine returns, as the clipped sum of a
// batch of n examples, n in every coordinate: the loop's arithmetic on it
// is known exactly.
type fakeBackend struct {
	params []float32
	opt    clip.Options
	calls  int
}

func (f *fakeBackend) Name() string       { return "fake" }
func (f *fakeBackend) InputShape() [3]int { return [3]int{1, 2, 2} }
func (f *fakeBackend) NewEngine(opt clip.Options) (Engine, error) {
	if len(opt.PerLayer) > 0 {
		return nil, dpcore.Invalidf("fake: per-layer clipping is not supported")
	}
	f.opt = opt
	return f, nil
}
func (f *fakeBackend) Params() []float32 { return f.params }
func (f *fakeBackend) ClippedSumContext(ctx context.Context, x []float32, y []int, dst []float32) (clip.Stats, error) {
	f.calls++
	for i := range dst {
		dst[i] = float32(len(y))
	}
	return clip.Stats{Examples: len(y)}, nil
}
func (f *fakeBackend) EvaluateContext(ctx context.Context, x []float32, y []int) (float64, float64, error) {
	return 1, 0.5, nil
}
func (f *fakeBackend) Save(w io.Writer) error {
	return binary.Write(w, binary.LittleEndian, f.params)
}
func (f *fakeBackend) Load(r io.Reader) error {
	return binary.Read(r, binary.LittleEndian, f.params)
}

// TestBackendSeam checks that Model.Backend replaces the model: the run's
// clipping options reach NewEngine, the loop's update is exactly
// -lr * sum / batch on the engine's Params, checkpoints hold what the
// backend saves, and a backend's refusal is the run's error.
func TestBackendSeam(t *testing.T) {
	trainSet, _, err := data.Synthetic(40, 0, data.Shape{C: 1, H: 2, W: 2}, 2, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{params: make([]float32, 3)}
	ck := filepath.Join(t.TempDir(), "ck")
	cfg := Config{Data: Data{Train: trainSet}, Model: ModelSpec{Backend: fb}, Privacy: privacy.Request{Steps: 3, Batch: 10, ClipNorm: 2}, NonPrivate: true, Optimizer: Optimizer{LearningRate: 0.25}, Output: Output{CheckpointPath: ck}}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fb.opt.MaxBatch != 10 || !fb.opt.NonPrivate || fb.opt.Norm != 2 || fb.calls != 3 || res.Model != "fake" {
		t.Fatalf("options %+v, %d calls, model %q", fb.opt, fb.calls, res.Model)
	}
	for i, v := range fb.params {
		if v != -0.75 { // three steps of -0.25 * (10 / 10)
			t.Fatalf("parameter %d = %v, want -0.75", i, v)
		}
	}
	// Resuming the finished run loads the parameters through Load.
	clear(fb.params)
	if res, err = Run(context.Background(), cfg); err != nil || res.Resumed != 3 || fb.params[0] != -0.75 {
		t.Fatalf("resume: %v, from step %d, parameter %v", err, res.Resumed, fb.params[0])
	}

	// A private run adds noise: without it every coordinate would move by
	// the same -n / expected batch.
	fb2 := &fakeBackend{params: make([]float32, 3)}
	priv := Config{
		Data:      Data{Train: trainSet},
		Model:     ModelSpec{Backend: fb2},
		Privacy:   privacy.Request{Steps: 1, Batch: 10, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, Accountant: privacy.RDP, Seed: []byte("backend seam"), InsecureSeed: true},
		Optimizer: Optimizer{LearningRate: 1},
	}
	if _, err := Run(context.Background(), priv); err != nil {
		t.Fatal(err)
	}
	if p := fb2.params; p[0] == p[1] && p[1] == p[2] || math.IsNaN(float64(p[0])) {
		t.Fatalf("private parameters %v carry no noise", fb2.params)
	}

	perLayer := cfg
	perLayer.Output.CheckpointPath, perLayer.Model.ClipPerLayer = "", []float64{1, 1}
	if _, err := Run(context.Background(), perLayer); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("per-layer clipping on a backend that refuses it: %v", err)
	}
}
