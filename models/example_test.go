package models_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/dpmf-go/dpmf/privacy"
	"log"
	"math/rand/v2"
	"slices"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/train"
)

func ExampleNewMLP() {
	// A 784-100-10 tanh network for 28x28 grey-scale images.
	m, err := models.NewMLP([3]int{1, 28, 28}, []int{100}, 10, nn.Tanh, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Name(), m.NumParams())
	for _, p := range m.Layout() {
		fmt.Println(p.Name, p.Shape, p.Offset)
	}
	// Output:
	// mlp 79510
	// dense0/w [784 100] 0
	// dense0/b [100] 78400
	// dense1/w [100 10] 78500
	// dense1/b [10] 79500
}

// The small end-to-end CNN for 28x28 grey-scale images (train's -model
// cnn-small): two strided convolutions and two dense layers.
func ExampleNewSmallCNN() {
	m, err := models.NewSmallCNN([3]int{1, 28, 28}, 10, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Name(), m.NumParams())
	for _, p := range m.Layout() {
		fmt.Println(p.Name, p.Shape)
	}
	// Output:
	// cnn-small 35226
	// conv0/w [64 16]
	// conv0/b [16]
	// conv1/w [256 32]
	// conv1/b [32]
	// dense2/w [800 32]
	// dense2/b [32]
	// dense3/w [32 10]
	// dense3/b [10]
}

// A small residual network with GroupNorm, built layer by layer: shapes
// are checked as layers are added and parameters are named and laid out in
// one buffer. The engine (package clip) trains it like the fixed models.
func ExampleBuilder() {
	b := models.NewBuilder("tiny-resnet", [3]int{3, 16, 16}, 1)
	b.Conv2D("stem", 8, 3, 1, 1, nn.Identity)
	b.Residual(func(r *models.Builder) {
		r.GroupNormAct("block.norm1", 4, nn.ReLU).
			Conv2D("block.conv1", 16, 3, 2, 1, nn.Identity).
			GroupNormAct("block.norm2", 4, nn.ReLU).
			Conv2D("block.conv2", 16, 3, 1, 1, nn.Identity)
	}, func(s *models.Builder) {
		s.Conv2D("block.shortcut", 16, 1, 2, 0, nn.Identity)
	})
	b.AvgPool(8).Dense("classifier", 10, nn.Identity)
	m, err := b.Model()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Name(), m.NumParams())
	e, err := clip.New(m, clip.Options{Norm: 1, MaxBatch: 4})
	if err != nil {
		log.Fatal(err)
	}
	x := make([]float32, 4*3*16*16)
	for i := range x {
		x[i] = float32(i%7) / 7
	}
	sum := make([]float32, m.NumParams())
	st, err := e.ClippedSum(x, []int{0, 1, 2, 3}, sum)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Examples, st.NonFinite)

	// A mistake is reported with the layer and the shapes involved.
	_, err = models.NewBuilder("bad", [3]int{3, 16, 16}, 1).
		Residual(func(r *models.Builder) { r.Conv2D("c", 8, 3, 2, 1, nn.ReLU) }, nil).
		Dense("out", 10, nn.Identity).Model()
	fmt.Println(err)
	// Output:
	// tiny-resnet 4074
	// 4 0
	// models: bad: residual1: body ends at 8x8x8, shortcut at 3x16x16
}

// toyImages returns n noisy 8x8 grey-scale images whose class says which
// half, left (0) or right (1), is brighter.
func toyImages(n int, seed uint64) *data.Dataset {
	rng := rand.New(rand.NewPCG(seed, 1))
	x, y := make([]float32, n*64), make([]int, n)
	for i := range n {
		y[i] = rng.IntN(2)
		for p := range 64 {
			v := rng.NormFloat64()
			if (p%8 < 4) == (y[i] == 0) {
				v += 1
			}
			x[i*64+p] = float32(v)
		}
	}
	d, err := data.NewDataset(x, y, data.Shape{C: 1, H: 8, W: 8}, 2)
	if err != nil {
		log.Fatal(err)
	}
	return d
}

// Bring your own model: build a residual network with GroupNorm and
// dropout, train it privately (DP-SGD at epsilon 4) through the Go API,
// save it with its privacy claim, and load it back for inference with no
// training dependencies. The model file describes the network layer by
// layer, so any Builder-made model saves and loads.
func Example_bringYourOwnModel() {
	trainSet, testSet := toyImages(1000, 1), toyImages(200, 2)

	b := models.NewBuilder("my-resnet", [3]int{1, 8, 8}, 1)
	b.Conv2D("stem", 8, 3, 1, 1, nn.Identity)
	b.Residual(func(r *models.Builder) {
		r.GroupNormAct("block.norm1", 4, nn.ReLU).Conv2D("block.conv1", 8, 3, 1, 1, nn.Identity).
			GroupNormAct("block.norm2", 4, nn.ReLU).Dropout(0.1).Conv2D("block.conv2", 8, 3, 1, 1, nn.Identity)
	}, nil)
	m, err := b.GroupNormAct("final.norm", 4, nn.ReLU).AvgPool(4).Dense("classifier", 2, nn.Identity).Model()
	if err != nil {
		log.Fatal(err)
	}

	res, err := train.Run(context.Background(), train.Config{
		Data:      train.Data{Train: trainSet, Test: testSet},
		Model:     train.ModelSpec{Built: m},
		Privacy:   privacy.Request{Steps: 15, Batch: 100, Mechanism: mfnoise.DPSGD{}, Epsilon: 4, ClipNorm: 1, Seed: []byte("bring-your-own-model example"), InsecureSeed: true},
		Optimizer: train.Optimizer{LearningRate: 1},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("trained %s privately at epsilon %.3g: held-out accuracy above 90%%: %v\n", m.Name(), res.Plan.Epsilon, res.Final.Accuracy > 0.9)

	meta := models.Metadata{Dataset: "toy/train", Classes: 2, Steps: res.Steps, Batch: 100, Privacy: models.Privacy{
		Private: true, Epsilon: res.Plan.Epsilon, Delta: res.Plan.Delta, Mechanism: "dpsgd", Accountant: string(res.Plan.Accountant)}}
	var file bytes.Buffer // models.WriteFile writes a file atomically
	if err := models.Save(&file, m, meta); err != nil {
		log.Fatal(err)
	}
	trained, err := models.Load(&file)
	if err != nil {
		log.Fatal(err)
	}
	a := trained.Architecture
	fmt.Println(a.Name, len(a.Layers), "layers, the second a", a.Layers[1].Kind, "block of", len(a.Layers[1].Body), "layers")
	fmt.Println("same parameters:", slices.Equal(trained.Model.Params(), m.Params()))
	classes, _, err := trained.Predict(testSet.X[:4*64])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("predicted", len(classes), "classes; claim:", trained.Metadata.Privacy)
	// Output:
	// trained my-resnet privately at epsilon 4: held-out accuracy above 90%: true
	// my-resnet 6 layers, the second a residual block of 5 layers
	// same parameters: true
	// predicted 4 classes; claim: (epsilon 4, delta 1e-05)-DP, mechanism dpsgd, pld accounting
}
