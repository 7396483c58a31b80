package gorgoniadp_test

import (
	"context"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/gorgoniadp"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// cnn is a gorgonia model of one 1x28x28 image written with gorgonia's own
// ops: a 3x3 convolution (8 channels, stride 2) plus a bias per channel
// with tanh, 2x2 max pooling and a dense layer of 10 logits. Weights
// start Glorot-uniform from a generator seeded with seed, biases at zero.
// Every op is one the compiler reads as a built-in layer, so the model
// trains on the batched executor (Model.Compiled).
func cnn(seed uint64) gorgoniadp.Graph {
	rng := rand.New(rand.NewPCG(seed, 0))
	glorot := func(fanIn, fanOut int, shape ...int) G.NodeConsOpt {
		lim := math.Sqrt(6 / float64(fanIn+fanOut))
		v := make([]float32, tensor.Shape(shape).TotalSize())
		for i := range v {
			v[i] = float32(lim * (2*rng.Float64() - 1))
		}
		return G.WithValue(tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v)))
	}
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 28, 28), G.WithName("x"))
	k := G.NewTensor(g, tensor.Float32, 4, G.WithShape(8, 1, 3, 3), G.WithName("conv"), glorot(9, 72, 8, 1, 3, 3))
	kb := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 8, 1, 1), G.WithName("conv-bias"), G.WithInit(G.Zeroes()))
	w := G.NewMatrix(g, tensor.Float32, G.WithShape(8*7*7, 10), G.WithName("w"), glorot(392, 10, 392, 10))
	b := G.NewVector(g, tensor.Float32, G.WithShape(10), G.WithName("b"), G.WithInit(G.Zeroes()))

	c := G.Must(G.Conv2d(x, k, tensor.Shape{3, 3}, []int{1, 1}, []int{2, 2}, []int{1, 1})) // (1, 8, 14, 14)
	c = G.Must(G.BroadcastAdd(c, kb, nil, []byte{0, 2, 3}))
	p := G.Must(G.MaxPool2D(G.Must(G.Tanh(c)), tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
	f := G.Must(G.Reshape(p, tensor.Shape{1, 8 * 7 * 7}))
	logits := G.Must(G.BroadcastAdd(G.Must(G.Mul(f, w)), b, nil, []byte{0}))
	return gorgoniadp.Graph{Input: x, Logits: logits, Params: []*G.Node{k, kb, w, b}}
}

// A gorgonia CNN trained privately through train.Run on the embedded
// Fashion-MNIST subset: DP-SGD at epsilon 8 (RDP accounting, which is fast
// enough to account every step of an example), each example's gradient
// computed by gorgonia's own backward on the user's graph and clipped. The
// learning rate and step count were chosen on a validation split of the
// training set (BENCHMARKS.md). The trained parameters are the graph's
// own tensors; the model is saved, reloaded into a fresh graph and
// evaluated again.
func Example() {
	trainSet, testSet, err := data.LoadEmbeddedFashionMNIST()
	if err != nil {
		log.Fatal(err)
	}
	model, err := gorgoniadp.New("gorgonia-cnn", cnn(1))
	if err != nil {
		log.Fatal(err)
	}
	compiled, _ := model.Compiled()
	fmt.Println("runs on the batched executor:", compiled)
	res, err := train.Run(context.Background(), train.Config{
		Data:      train.Data{Train: trainSet, Test: testSet},
		Model:     train.ModelSpec{Backend: model},
		Privacy:   privacy.Request{Steps: 100, Batch: 64, Mechanism: mfnoise.DPSGD{}, Epsilon: 8, Accountant: privacy.RDP, ClipNorm: 1, Seed: []byte("gorgoniadp example"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 2},
		Output:    train.Output{EvalEvery: 100},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("epsilon %.2f, test accuracy %.3f\n", res.Plan.Epsilon, res.Final.Accuracy)

	dir, err := os.MkdirTemp("", "gorgoniadp")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "cnn.params")
	if err := model.SaveFile(path); err != nil {
		log.Fatal(err)
	}
	reloaded, err := gorgoniadp.New("gorgonia-cnn", cnn(2)) // other weights, then loaded
	if err != nil {
		log.Fatal(err)
	}
	if err := reloaded.LoadFile(path); err != nil {
		log.Fatal(err)
	}
	eng, err := reloaded.Engine(clip.Options{NonPrivate: true, MaxBatch: 1})
	if err != nil {
		log.Fatal(err)
	}
	_, acc, err := eng.Evaluate(testSet.X, testSet.Y)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reloaded accuracy equals the run's:", acc == res.Final.Accuracy)
	// Output:
	// runs on the batched executor: true
	// epsilon 8.00, test accuracy 0.781
	// reloaded accuracy equals the run's: true
}
