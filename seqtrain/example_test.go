package seqtrain_test

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/data"
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
