package models

import (
	"fmt"
	"math"
	"sync"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// Trained is a model read from a model file, ready for inference: the
// rebuilt model with its parameters, its architecture, and the metadata of
// the run that produced it (dataset and privacy claim). Inference runs
// forward only on the planned executor of package nn; nothing of the
// training stack (clipping, noise, accounting, sampling) is linked in.
type Trained struct {
	Model        Model
	Architecture Architecture
	Metadata     Metadata

	mu   sync.Mutex
	plan *nn.Plan    // built on the first Predict
	seq  *nn.SeqPlan // a transformer's
}

// predictChunk is the executor's MaxBatch, which sizes only the
// per-example statistics of training steps: Forward takes a batch of any
// length, and chunks are sized automatically (nn.Options).
const predictChunk = 16

// Predict returns, for the examples in batch (each C*H*W floats in CHW
// order, preprocessed as the training data was), the most likely class of
// each and the class probabilities (softmax of the logits, Classes() per
// example, row-major). Inputs must be finite. Calls are serialized, so a
// Trained may be shared by goroutines.
//
// For a transformer (TransformerOf), an example is Context token ids
// right-padded with -1; a classifier gives its classes, a language model
// the next token after each example's last one: the most likely token
// and the Vocab probabilities.
func (t *Trained) Predict(batch []float32) (classes []int, probs []float32, err error) {
	if net, c, ok := TransformerOf(t.Model); ok {
		return t.predictSeq(net, c, batch)
	}
	in := t.Architecture.Input
	per, k := in[0]*in[1]*in[2], t.Architecture.Classes
	n := len(batch) / per
	if n == 0 || len(batch) != n*per {
		return nil, nil, dpcore.Invalid("models", "predict: %d floats is not a positive multiple of one example's %d (%dx%dx%d)", len(batch), per, in[0], in[1], in[2])
	}
	for i, v := range batch {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, nil, dpcore.Invalid("models", "predict: example %d, feature %d is %v", i/per, i%per, v)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.plan == nil {
		p, err := nn.NewPlan(t.Model.Network(), t.Model.Params(), nn.Options{MaxBatch: predictChunk})
		if err != nil {
			return nil, nil, fmt.Errorf("models: predict: %w", err)
		}
		t.plan = p
	}
	probs = make([]float32, n*k)
	if err := t.plan.Forward(batch, probs); err != nil {
		return nil, nil, fmt.Errorf("models: predict: %w", err)
	}
	classes = make([]int, n)
	for i := range n {
		classes[i] = softmax(probs[i*k : (i+1)*k])
	}
	return classes, probs, nil
}

func (t *Trained) predictSeq(net nn.Transformer, c TransformerConfig, batch []float32) ([]int, []float32, error) {
	n := len(batch) / c.Context
	if n == 0 || len(batch) != n*c.Context {
		return nil, nil, dpcore.Invalid("models", "predict: %d values is not a positive multiple of one example's %d token ids", len(batch), c.Context)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seq == nil {
		p, err := nn.NewSeqPlan(net, t.Model.Params(), nn.Options{MaxBatch: predictChunk})
		if err != nil {
			return nil, nil, fmt.Errorf("models: predict: %w", err)
		}
		t.seq = p
	}
	k := c.Vocab
	if c.Classes > 0 {
		k = c.Classes
	}
	probs := make([]float32, n*k)
	if err := t.seq.LastLogits(batch, probs); err != nil {
		return nil, nil, fmt.Errorf("models: predict: %w", err)
	}
	classes := make([]int, n)
	for i := range n {
		classes[i] = softmax(probs[i*k : (i+1)*k])
	}
	return classes, probs, nil
}

// softmax replaces a row of logits by its probabilities, computed in
// float64 with the maximum subtracted, and returns the index of the first
// largest logit.
func softmax(row []float32) int {
	mx, arg := math.Inf(-1), 0
	for j, v := range row {
		if float64(v) > mx {
			mx, arg = float64(v), j
		}
	}
	s := 0.0
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	for j, v := range row {
		row[j] = float32(math.Exp(float64(v)-mx) / s)
	}
	return arg
}
