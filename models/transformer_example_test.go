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

// The matrix products of one step of a small transformer, recorded and
// timed alone: their time against the step's is the step's fraction of
// its GEMM bound (BenchmarkGPT2Step's gemm-bound). Per example of 8
// tokens: the forward pass 69,632 flops, the backward 172,032 (input
// gradients, the tied output matrix's gradient, and for each block
// weight, a ghost norm at this short context, two Gram matrices in
// float64 and the product that adds its gradient to the sum).
func ExampleTransformerOf_products() {
	c := models.TransformerConfig{Vocab: 64, Context: 8, Dim: 16, Heads: 2, Blocks: 1, Causal: true}
	m, err := models.NewTransformer("tiny-gpt2", c, 1)
	if err != nil {
		panic(err)
	}
	net, _, _ := models.TransformerOf(m)
	plan, err := nn.NewSeqPlan(net, m.Params(), nn.Options{MaxBatch: 2, Workers: 1})
	if err != nil {
		panic(err)
	}
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sum := make([]float32, m.NumParams())
	plan.RecordProducts(true)
	if _, err := plan.Step(x, []int{0, 0}, sum, nil); err != nil {
		panic(err)
	}
	list := plan.Products()
	plan.RecordProducts(false)
	flops := 0.0
	for _, q := range list {
		flops += float64(q.Count) * q.Flops()
	}
	alone, err := plan.TimeProducts(list, 0)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d product shapes, %.0f flops, timed alone: %v\n", len(list), flops, alone > 0)
	// Output: 19 product shapes, 483328 flops, timed alone: true
}
