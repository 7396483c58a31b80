package models_test

import (
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

func ExampleNewMLP() {
	// A 784-100-10 tanh network for 28x28 grey-scale images.
	m, err := models.NewMLP([3]int{1, 28, 28}, []int{100}, 10, "tanh", 1)
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
	// models: bad: residual1: body ends at 8x8x8, shortcut at 3x16x16: invalid argument
}
