package models_test

import (
	"fmt"

	"github.com/dpmf-go/dpmf/models"
)

// The ScatterNet of Tramèr and Boneh (2021) for Fashion-MNIST: the
// scattering transform turns a 28x28 image into 81 channels of 7x7, and
// the model is GroupNorm and a linear layer on them.
func ExampleScattering() {
	sc, err := models.NewScattering(28, 28, 2, 8)
	if err != nil {
		panic(err)
	}
	img := make([]float32, 28*28)
	for i := range img {
		img[i] = float32(i%28) / 28 // a horizontal ramp
	}
	feat := make([]float32, 81*7*7)
	if err := sc.Transform(feat, img, 1); err != nil {
		panic(err)
	}
	m, err := models.NewScatterNet(sc.OutShape(1), 10, 27, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(sc)
	fmt.Printf("S0 at the centre: %.3f\n", feat[3*7+3])
	fmt.Println(m.Name(), m.NumParams(), "parameters")
	// Output:
	// scattering J=2 L=8 (28x28 -> 81 channels of 7x7)
	// S0 at the centre: 0.500
	// scatternet 39862 parameters
}
