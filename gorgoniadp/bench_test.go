package gorgoniadp

import (
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// fashionTwin is the model of the package example (3x3 convolution of 8
// channels, stride 2, pad 1, tanh, 2x2 max pool, dense 10 logits on
// 1x28x28) as a models.Model for the nn executor and as a gorgonia graph
// over the same parameters.
func fashionTwin(tb testing.TB) (models.Model, *Model) {
	tb.Helper()
	mm, err := models.NewBuilder("fashion-twin", [3]int{1, 28, 28}, 3).
		Conv2D("conv", 8, 3, 2, 1, nn.Tanh).MaxPool(2).Dense("out", 10, nn.Identity).Model()
	if err != nil {
		tb.Fatal(err)
	}
	g := G.NewGraph()
	var params []*G.Node
	for _, p := range mm.Layout() {
		v := append([]float32(nil), mm.Params()[p.Offset:p.Offset+p.Len]...)
		params = append(params, G.NewTensor(g, tensor.Float32, len(p.Shape), G.WithShape(p.Shape...), G.WithName(p.Name),
			G.WithValue(tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(v)))))
	}
	x := G.NewTensor(g, tensor.Float32, 4, G.WithShape(1, 1, 28, 28), G.WithName("x"))
	col := G.Must(G.Im2Col(x, tensor.Shape{3, 3}, tensor.Shape{1, 1}, tensor.Shape{2, 2}, tensor.Shape{1, 1}))
	u := G.Must(G.Reshape(col, tensor.Shape{14 * 14, 9}))
	z := G.Must(G.Tanh(dense(u, params[0], params[1])))
	z = G.Must(G.Transpose(G.Must(G.Reshape(z, tensor.Shape{1, 14, 14, 8})), 0, 3, 1, 2))
	p := G.Must(G.MaxPool2D(z, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
	f := G.Must(G.Reshape(p, tensor.Shape{1, 8 * 7 * 7}))
	gm, err := New("fashion-twin", Graph{Input: x, Logits: dense(f, params[2], params[3]), Params: params})
	if err != nil {
		tb.Fatal(err)
	}
	return mm, gm
}

// BenchmarkPrivateStep times the clipped sum of a batch of 64 (the
// private step's work; the noise and the update cost the same for both)
// for the package example's model, on the nn executor and through the
// gorgonia adapter.
func BenchmarkPrivateStep(b *testing.B) {
	const batch = 64
	mm, gm := fashionTwin(b)
	x, y := randomBatch(rand.New(rand.NewPCG(1, 1)), batch, 28*28, 10)
	opt := clip.Options{Norm: 1, MaxBatch: batch}
	b.Run("nn", func(b *testing.B) {
		e, err := clip.New(mm, opt)
		if err != nil {
			b.Fatal(err)
		}
		dst := make([]float32, mm.NumParams())
		for b.Loop() {
			if _, err := e.ClippedSum(x, y, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gorgonia", func(b *testing.B) {
		e, err := gm.Engine(opt)
		if err != nil {
			b.Fatal(err)
		}
		dst := make([]float32, gm.NumParams())
		for b.Loop() {
			if _, err := e.ClippedSum(x, y, dst); err != nil {
				b.Fatal(err)
			}
		}
	})
}
