package text

import (
	"errors"
	"math"
)

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
		m, lz, err := logSumExp(row)
		if err != nil {
			return invalidf("nll: logits of position %d: %v", i, err)
		}
		sum += (m - float64(row[y])) + lz
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

// LogSoftmax writes the log-probabilities of logits into dst (same
// length), in float64: dst[i] = logits[i] - log sum_j exp(logits[j]).
// Non-finite logits are an error.
func LogSoftmax(dst []float64, logits []float32) error {
	if len(dst) != len(logits) || len(logits) == 0 {
		return invalidf("log-softmax: %d outputs for %d logits", len(dst), len(logits))
	}
	m, lz, err := logSumExp(logits)
	if err != nil {
		return invalidf("log-softmax: %v", err)
	}
	for i, v := range logits {
		dst[i] = (float64(v) - m) - lz
	}
	return nil
}

// logSumExp returns m and lz with log sum exp(row) = m + lz, m the largest
// entry (kept apart so that logits far from zero keep their precision).
func logSumExp(row []float32) (m, lz float64, err error) {
	m = math.Inf(-1)
	for _, v := range row {
		if v-v != 0 {
			return 0, 0, errors.New("not finite")
		}
		m = max(m, float64(v))
	}
	var z float64
	for _, v := range row {
		z += math.Exp(float64(v) - m)
	}
	return m, math.Log(z), nil
}
