package models_test

import (
	"fmt"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// A small GPT-2-shaped language model with LoRA adapters on the
// attention, its base frozen, and one private step: each example's
// adapter gradients clipped, summed.
func ExampleNewTransformer() {
	c := models.TransformerConfig{Vocab: 64, Context: 8, Dim: 16, Heads: 2, Blocks: 2, Causal: true,
		LoRARank: 4, LoRAAlpha: 8, FreezeBase: true}
	m, err := models.NewTransformer("tiny-gpt2", c, 1)
	if err != nil {
		panic(err)
	}
	net, _, _ := models.TransformerOf(m)
	plan, err := nn.NewSeqPlan(net, m.Params(), nn.Options{MaxBatch: 2})
	if err != nil {
		panic(err)
	}
	// Two examples of 8 token ids; the second is padded with -1.
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -1, -1, -1, -1, -1}
	sum := make([]float32, m.NumParams())
	loss, err := plan.Step(x, []int{0, 0}, sum, nil)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d parameters, %d gradient groups (one adapter pair per block), loss %.1f\n", m.NumParams(), plan.Affine(), loss[0])
	// Output: 8256 parameters, 2 gradient groups (one adapter pair per block), loss 4.2
}

// Importing a Hugging Face GPT-2 directory (config.json and
// model.safetensors).
func ExampleReadGPT2Dir() {
	tr, err := models.ReadGPT2Dir("testdata/gpt2", models.GPT2Options{})
	if err != nil {
		panic(err)
	}
	_, c, _ := models.TransformerOf(tr.Model)
	fmt.Printf("vocabulary %d, context %d, %d blocks of dimension %d, %d parameters\n", c.Vocab, c.Context, c.Blocks, c.Dim, tr.Model.NumParams())
	// Output: vocabulary 50, context 16, 2 blocks of dimension 32, 27584 parameters
}
