package seqtrain

import (
	"context"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/text"
)

// Forwarder is a model over token ids as evaluation and prediction see
// it: a next-token model (Classes 0) or a sequence classifier.
type Forwarder interface {
	// Context is the number of token positions of an input.
	Context() int
	// Vocab is the number of token ids.
	Vocab() int
	// Classes is a classifier's number of classes, 0 for a next-token
	// model.
	Classes() int
	// Forward writes the outputs of the inputs x (Context ids each as
	// float32, right-padded with -1) into out: per input, Context x Vocab
	// next-token logits (position t predicting token t+1), or Classes
	// class logits.
	Forward(x, out []float32) error
}

// LastLogitser is a Forwarder that can compute the logits at each
// input's last real token alone (Vocab next-token logits, or Classes),
// which is all prediction needs.
type LastLogitser interface {
	LastLogits(x, out []float32) error
}

// Outputs is the length of one input's output of f.
func Outputs(f Forwarder) int {
	if k := f.Classes(); k > 0 {
		return k
	}
	return f.Context() * f.Vocab()
}

// MaxOutputs bounds the logits of one batch Evaluate asks Forward for
// (256 MiB of float32), which sizes its batches.
const MaxOutputs = 1 << 26

// Result is what Evaluate measures.
type Result struct {
	Examples int
	// Loss is the mean cross-entropy in nats: per predicted token for a
	// next-token model, per example for a classifier.
	Loss float64
	// Accuracy is how often the most likely token is the next one (per
	// predicted token), or the most likely class the label.
	Accuracy float64
	// Tokens is the number of predicted tokens (0 for a classifier):
	// every position followed by a real token.
	Tokens int
	// Perplexity is exp(Loss) for a next-token model (0 for a
	// classifier).
	Perplexity float64
}

// Evaluate runs f over the examples x (Context ids each, right-padded
// with -1) with labels y (a classifier's; ignored, but counting the
// examples, for a next-token model) and returns the loss and accuracy.
// Non-finite logits are an error.
func Evaluate(ctx context.Context, f Forwarder, x []float32, y []int) (Result, error) {
	c, v, k := f.Context(), f.Vocab(), f.Classes()
	if c < 1 || v < 1 || k < 0 || len(x) != len(y)*c {
		return Result{}, dpcore.Invalid("seqtrain", "evaluate: %d ids for %d examples of context %d (vocabulary %d, %d classes)", len(x), len(y), c, v, k)
	}
	per := Outputs(f)
	batch := max(1, min(256, MaxOutputs/per))
	out := make([]float32, min(batch, len(y))*per)
	targets := make([]int, c)
	var nll text.NLL
	correct, counted := 0, 0
	for i0 := 0; i0 < len(y); i0 += batch {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		n := min(batch, len(y)-i0)
		xb := x[i0*c : (i0+n)*c]
		o := out[:n*per]
		if err := f.Forward(xb, o); err != nil {
			return Result{}, fmt.Errorf("seqtrain: evaluate: %w", err)
		}
		for i := range n {
			row, ex := o[i*per:(i+1)*per], xb[i*c:(i+1)*c]
			if k > 0 {
				targets = append(targets[:0], y[i0+i])
			} else {
				targets = targets[:c]
				for t := range c {
					targets[t] = -1
					if t+1 < c && ex[t] >= 0 && ex[t+1] >= 0 {
						targets[t] = int(ex[t+1])
					}
				}
			}
			w := len(row) / len(targets)
			if err := nll.AddLogits(row, w, targets); err != nil {
				return Result{}, fmt.Errorf("seqtrain: evaluate: example %d: %w", i0+i, err)
			}
			for t, target := range targets {
				if target < 0 {
					continue
				}
				counted++
				r := row[t*w : (t+1)*w]
				best := 0
				for j, l := range r {
					if l > r[best] {
						best = j
					}
				}
				if best == target {
					correct++
				}
			}
		}
	}
	res := Result{Examples: len(y), Loss: nll.Loss()}
	if counted > 0 {
		res.Accuracy = float64(correct) / float64(counted)
	}
	if k == 0 {
		res.Tokens, res.Perplexity = nll.Tokens, nll.Perplexity()
	}
	return res, nil
}
