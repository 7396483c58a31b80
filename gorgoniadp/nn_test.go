package gorgoniadp

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// nnTwin builds a convolution + max pool + dense network as a models.Model
// (run by the nn executor) and the same network as a gorgonia graph of
// ordinary ops over copies of its parameters, in the same flat order.
func nnTwin(t *testing.T) (models.Model, *Model) {
	t.Helper()
	const c, h, w, out, hidden, classes = 2, 6, 6, 3, 5, 4
	mm, err := models.NewBuilder("twin", [3]int{c, h, w}, 7).
		Conv2D("conv", out, 3, 1, 1, nn.Tanh).MaxPool(2).
		Dense("hidden", hidden, nn.ReLU).Dense("out", classes, nn.Identity).Model()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, p := range mm.Layout() {
		if len(p.Shape) == 1 { // biases start at zero: make them count
			for j := range p.Len {
				mm.Params()[p.Offset+j] = float32(0.2 * rng.NormFloat64())
			}
		}
	}
	g := G.NewGraph()
	var params []*G.Node
	for _, p := range mm.Layout() {
		v := append([]float32(nil), mm.Params()[p.Offset:p.Offset+p.Len]...)
		params = append(params, G.NewTensor(g, tensor.Float32, len(p.Shape), G.WithShape(p.Shape...), G.WithName(p.Name),
			G.WithValue(tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(v)))))
	}
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, c, h, w), G.WithName("x"))
	// The nn convolution is Z = U W + b over the im2col-unfolded input,
	// W of shape (c*3*3, out) in gorgonia's Im2Col order.
	col := G.Must(G.Im2Col(x, tensor.Shape{3, 3}, tensor.Shape{1, 1}, tensor.Shape{1, 1}, tensor.Shape{1, 1}))
	u := G.Must(G.Reshape(col, tensor.Shape{h * w, c * 9}))
	z := G.Must(G.Tanh(dense(u, params[0], params[1])))
	z = G.Must(G.Transpose(G.Must(G.Reshape(z, tensor.Shape{1, h, w, out})), 0, 3, 1, 2))
	p := G.Must(G.MaxPool2D(z, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
	f := G.Must(G.Reshape(p, tensor.Shape{1, out * h * w / 4}))
	hd := G.Must(G.Rectify(dense(f, params[2], params[3])))
	gm, err := New("twin", Graph{Input: x, Logits: dense(hd, params[4], params[5]), Params: params})
	if err != nil {
		t.Fatal(err)
	}
	return mm, gm
}

// TestMatchesNN checks that the adapter's clipped sum, statistics and
// evaluation, on the per-example path and compiled, equal the nn
// executor's (clip.Engine) on the same architecture and parameters, to
// float32 rounding, with about half the examples clipped.
func TestMatchesNN(t *testing.T) {
	for _, compiled := range []bool{false, true} {
		mm, gm := nnTwin(t)
		if ok, why := gm.Compiled(); !ok {
			t.Fatalf("the twin is not compiled: %s", why)
		}
		if !compiled {
			gm.fast = nil
		}
		matchesNN(t, mm, gm)
	}
}

func matchesNN(t *testing.T, mm models.Model, gm *Model) {
	const n, zeta = 16, 4.0
	ne, err := clip.New(mm, clip.Options{Norm: zeta, MaxBatch: n})
	if err != nil {
		t.Fatal(err)
	}
	ge, err := gm.Engine(clip.Options{Norm: zeta, MaxBatch: n})
	if err != nil {
		t.Fatal(err)
	}
	if (ge.fast != nil) != (gm.fast != nil) {
		t.Fatal("engine path differs from the model's")
	}
	x, y := randomBatch(rand.New(rand.NewPCG(9, 9)), n, 2*6*6, 4)
	want := make([]float32, mm.NumParams())
	got := make([]float32, gm.NumParams())
	nst, err := ne.ClippedSum(x, y, want)
	if err != nil {
		t.Fatal(err)
	}
	gst, err := ge.ClippedSum(x, y, got)
	if err != nil {
		t.Fatal(err)
	}
	if j, ok := close32(got, want); !ok {
		t.Fatalf("clipped sum entry %d: gorgonia %v, nn %v", j, got[max(j, 0)], want[max(j, 0)])
	}
	t.Logf("norm quantiles %v", nst.NormQuantiles)
	if nst.Clipped != gst.Clipped || nst.Clipped == 0 || nst.Clipped == 1 {
		t.Fatalf("clipped fraction: gorgonia %v, nn %v (want equal, strictly between 0 and 1)", gst.Clipped, nst.Clipped)
	}
	for q := range nst.NormQuantiles {
		if math.Abs(nst.NormQuantiles[q]-gst.NormQuantiles[q]) > 1e-5*nst.NormQuantiles[q] {
			t.Fatalf("norm quantile %d: gorgonia %v, nn %v", q, gst.NormQuantiles[q], nst.NormQuantiles[q])
		}
	}
	if math.Abs(nst.Loss-gst.Loss) > 1e-5*(1+nst.Loss) {
		t.Fatalf("loss: gorgonia %v, nn %v", gst.Loss, nst.Loss)
	}
	nl, na, err := ne.Evaluate(x, y)
	if err != nil {
		t.Fatal(err)
	}
	gl, ga, err := ge.Evaluate(x, y)
	if err != nil {
		t.Fatal(err)
	}
	if na != ga || math.Abs(nl-gl) > 1e-5*(1+nl) {
		t.Fatalf("evaluation: gorgonia (%v, %v), nn (%v, %v)", gl, ga, nl, na)
	}
}

// TestRunMatchesNN trains the same network through train.Run twice from
// the same seed, once on the nn executor (Config.Model) and once through
// the adapter (Model.Backend): same batches, same noise, so the final
// parameters agree to float32 rounding, and the checkpoint of the
// adapter's run resumes.
func TestRunMatchesNN(t *testing.T) {
	mm, gm := nnTwin(t)
	init := append([]float32(nil), gm.Params()...)
	trainSet, err := data.NewDataset(randomData(rand.New(rand.NewPCG(4, 4)), 200, 2*6*6), randomLabels(rand.New(rand.NewPCG(4, 5)), 200, 4), data.Shape{C: 2, H: 6, W: 6}, 4)
	if err != nil {
		t.Fatal(err)
	}
	cfg := train.Config{
		Data:      train.Data{Train: trainSet},
		Privacy:   privacy.Request{Steps: 6, Batch: 20, Mechanism: mfnoise.DPSGD{}, NoiseMultiplier: 1, Accountant: privacy.RDP, ClipNorm: 1, Seed: []byte("gorgoniadp run matches nn"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 0.5},
	}
	a := cfg
	a.Model.Built = mm
	if _, err := train.Run(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	b := cfg
	b.Model.Backend = gm
	b.Output.CheckpointPath = filepath.Join(t.TempDir(), "ck")
	res, err := train.Run(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != "twin" {
		t.Fatalf("result names model %q", res.Model)
	}
	if j, ok := close32(gm.Params(), mm.Params()); !ok {
		t.Fatalf("parameter %d after training: gorgonia %v, nn %v", j, gm.Params()[max(j, 0)], mm.Params()[max(j, 0)])
	}
	if _, same := close32(gm.Params(), init); same {
		t.Fatal("training did not move the parameters")
	}
	if &gm.Tensors()[0].Data().([]float32)[0] != &gm.Params()[0] {
		t.Fatal("parameter tensor does not view the trained buffer")
	}
	// Resuming a finished run from its checkpoint loads the parameters
	// through Backend.Load and trains no further.
	saved := append([]float32(nil), gm.Params()...)
	clear(gm.Params())
	res, err = train.Run(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed != cfg.Privacy.Steps {
		t.Fatalf("resumed from step %d, want %d", res.Resumed, cfg.Privacy.Steps)
	}
	if j, ok := close32(gm.Params(), saved); !ok {
		t.Fatalf("parameter %d after resuming: %v, saved %v", j, gm.Params()[max(j, 0)], saved[max(j, 0)])
	}
}

func randomData(rng *rand.Rand, n, chw int) []float32 {
	x := make([]float32, n*chw)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func randomLabels(rng *rand.Rand, n, classes int) []int {
	y := make([]int, n)
	for i := range y {
		y[i] = rng.IntN(classes)
	}
	return y
}
