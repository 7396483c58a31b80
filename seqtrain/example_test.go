package seqtrain_test

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/seqtrain"
	"github.com/dpmf-go/dpmf/text"
)

// uniform predicts every token with the same probability.
type uniform struct{ context, vocab int }

func (u uniform) Context() int                   { return u.context }
func (u uniform) Vocab() int                     { return u.vocab }
func (u uniform) Classes() int                   { return 0 }
func (u uniform) Forward(x, out []float32) error { clear(out); return nil }

// A model that knows nothing has the perplexity of its vocabulary size.
func ExampleEvaluate() {
	d, _ := data.NewTextDataset([]data.TextDocument{{Text: "In the beginning"}}, text.Bytes{}, data.TextDataOptions{Context: 8})
	res, err := seqtrain.Evaluate(context.Background(), uniform{8, 257}, d.X, d.Y)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d tokens predicted, perplexity %.0f\n", res.Tokens, res.Perplexity)
	// Output: 16 tokens predicted, perplexity 257
}

// A GPT-2-shaped model with LoRA adapters and a frozen base: its backend
// gives the training loop the adapters only, so the private run clips,
// noises and updates them and never writes the base. Set it as
// train.Config's backend and run.
func ExampleNewBackend() {
	c := models.TransformerConfig{Vocab: 257, Context: 8, Dim: 16, Heads: 2, Blocks: 1, Causal: true,
		LoRARank: 2, LoRAAlpha: 4, FreezeBase: true}
	m, err := models.NewTransformer("tiny-gpt", c, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := seqtrain.NewBackend(m)
	if err != nil {
		fmt.Println(err)
		return
	}
	eng, err := b.NewEngine(clip.Options{Norm: 1, MaxBatch: 8})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d parameters, %d trained\n", m.NumParams(), len(eng.Params()))
	// Output: 7680 parameters, 128 trained
}
