package models_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// ExampleLoad saves a model with the privacy claim of the run that trained
// it, loads it back with no training dependencies, and predicts class
// probabilities for two examples.
func ExampleLoad() {
	m, err := models.NewMLP([3]int{1, 2, 2}, []int{8}, 3, nn.Tanh, 1)
	if err != nil {
		log.Fatal(err)
	}
	meta := models.Metadata{Dataset: "toy/train", Classes: 3, Steps: 100,
		Privacy: models.Privacy{Private: true, Epsilon: 8, Delta: 1e-5, Mechanism: "bandmf:4", Accountant: "pld"}}
	var file bytes.Buffer // models.WriteFile writes a file atomically
	if err := models.Save(&file, m, meta); err != nil {
		log.Fatal(err)
	}

	trained, err := models.Load(&file)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(trained.Architecture.Name, len(trained.Architecture.Layers), "layers", trained.Metadata.Dataset)
	fmt.Println(trained.Metadata.Privacy)
	batch := []float32{
		0.1, 0.2, 0.3, 0.4, // example 0, CHW order
		-1, 0, 1, 0, // example 1
	}
	classes, probs, err := trained.Predict(batch)
	if err != nil {
		log.Fatal(err)
	}
	for i := range classes {
		p := probs[3*i : 3*i+3]
		fmt.Printf("example %d: %d probabilities, sum %.3f, class %d has the largest\n", i, len(p), p[0]+p[1]+p[2], classes[i])
	}
	// Output:
	// mlp 3 layers toy/train
	// (epsilon 8, delta 1e-05)-DP, mechanism bandmf:4, pld accounting
	// example 0: 3 probabilities, sum 1.000, class 0 has the largest
	// example 1: 3 probabilities, sum 1.000, class 0 has the largest
}
