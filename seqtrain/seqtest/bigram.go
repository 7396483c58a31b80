// Package seqtest provides a model over token ids for tests of what reads
// a seqtrain.Forwarder: its outputs are known in closed form.
package seqtest

import (
	"math"
	"slices"
)

// Bigram is a next-token model whose logits at a position depend on that
// position's token only: logit j = -|j - (token+1)| / 8, so it favours
// the next id. With Classes > 0 it is a classifier whose class j has
// logit j times the last real token. Calls counts Forward's calls.
type Bigram struct {
	Ctx, V, K int
	Calls     int
}

func (b *Bigram) Context() int { return b.Ctx }
func (b *Bigram) Vocab() int   { return b.V }
func (b *Bigram) Classes() int { return b.K }

// Forward writes the logits of the inputs x (Ctx ids each, right-padded
// with -1).
func (b *Bigram) Forward(x, out []float32) error {
	b.Calls++
	if b.K > 0 {
		for i := range len(x) / b.Ctx {
			row := x[i*b.Ctx : (i+1)*b.Ctx]
			last := row[len(row)-1]
			if k := slices.Index(row, -1); k >= 0 {
				last = row[k-1]
			}
			for j := range b.K {
				out[i*b.K+j] = float32(j) * last
			}
		}
		return nil
	}
	for i, tok := range x {
		for j := range b.V {
			out[i*b.V+j] = float32(-math.Abs(float64(j)-float64(tok+1)) / 8)
		}
	}
	return nil
}

// LogProbs is the next-token distribution after tok, in float64.
func (b *Bigram) LogProbs(tok int) []float64 {
	l := make([]float64, b.V)
	var z float64
	for j := range l {
		l[j] = -math.Abs(float64(j)-float64(tok+1)) / 8
		z += math.Exp(l[j])
	}
	for j := range l {
		l[j] -= math.Log(z)
	}
	return l
}
