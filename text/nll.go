package text

import "math"

// NLL accumulates the negative log-likelihood, in nats, of next-token
// targets under a model's predictions: Loss is the mean per token (the
// cross-entropy language models train on) and Perplexity its exponential.
// The zero value is empty.
type NLL struct {
	Sum    float64 // total negative log-likelihood
	Tokens int     // targets counted
}

// AddLogits adds the targets' negative log-likelihoods under logits, one
// row of vocab logits per target (log-softmax in float64). A negative
// target is padding and is skipped. Non-finite logits, a target outside
// [0, vocab) or a length mismatch are errors, and nothing is added.
func (l *NLL) AddLogits(logits []float32, vocab int, targets []int) error {
	if vocab <= 0 || len(logits) != len(targets)*vocab {
		return invalidf("nll: %d logits for %d targets of vocabulary %d", len(logits), len(targets), vocab)
	}
	var sum float64
	n := 0
	for i, y := range targets {
		if y < 0 {
			continue
		}
		if y >= vocab {
			return invalidf("nll: target %d (position %d) outside the vocabulary of %d", y, i, vocab)
		}
		row := logits[i*vocab : (i+1)*vocab]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, float64(v))
		}
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v) - m)
		}
		nll := (m - float64(row[y])) + math.Log(z)
		if math.IsNaN(nll) || math.IsInf(nll, 0) {
			return invalidf("nll: logits of position %d are not finite", i)
		}
		sum += nll
		n++
	}
	l.Sum += sum
	l.Tokens += n
	return nil
}

// Loss is the mean negative log-likelihood per token (NaN when empty).
func (l NLL) Loss() float64 {
	if l.Tokens == 0 {
		return math.NaN()
	}
	return l.Sum / float64(l.Tokens)
}

// Perplexity is exp(Loss): the size of a uniform vocabulary that would be
// as hard to predict.
func (l NLL) Perplexity() float64 { return math.Exp(l.Loss()) }
