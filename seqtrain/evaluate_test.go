package seqtrain_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/seqtrain"
	"github.com/dpmf-go/dpmf/text"
)

// bigram's logits at a position depend on that position's token only:
// logit j = -|j - (token+1)| / 8; as a classifier, class j's logit is j
// times the last real token.
type bigram struct{ context, vocab, classes int }

func (b bigram) Context() int { return b.context }
func (b bigram) Vocab() int   { return b.vocab }
func (b bigram) Classes() int { return b.classes }
func (b bigram) Forward(x, out []float32) error {
	if b.classes > 0 {
		for i := range len(x) / b.context {
			row := x[i*b.context : (i+1)*b.context]
			last := row[len(row)-1]
			if k := slices.Index(row, -1); k >= 0 {
				last = row[k-1]
			}
			for j := range b.classes {
				out[i*b.classes+j] = float32(j) * last
			}
		}
		return nil
	}
	for i, tok := range x {
		for j := range b.vocab {
			out[i*b.vocab+j] = float32(-math.Abs(float64(j)-float64(tok+1)) / 8)
		}
	}
	return nil
}

// logProb is the bigram's log-probability of next after tok, in float64.
func (b bigram) logProb(tok, next int) float64 {
	var z float64
	for j := range b.vocab {
		z += math.Exp(-math.Abs(float64(j)-float64(tok+1)) / 8)
	}
	return -math.Abs(float64(next)-float64(tok+1))/8 - math.Log(z)
}

// TestEvaluateNextToken checks the loss, perplexity and accuracy on packed
// documents against the bigram's log-probabilities summed by hand over
// every (token, next token) pair of the stream.
func TestEvaluateNextToken(t *testing.T) {
	m := bigram{context: 4, vocab: 257}
	d, err := data.NewTextDataset([]data.TextDocument{{Text: "abcab"}, {Text: "zz"}}, text.Bytes{}, data.TextDataOptions{Context: 4})
	if err != nil {
		t.Fatal(err)
	}
	res, err := seqtrain.Evaluate(context.Background(), m, d.X, d.Y)
	if err != nil {
		t.Fatal(err)
	}
	stream := []int{'a', 'b', 'c', 'a', 'b', text.BytesEOS, 'z', 'z', text.BytesEOS}
	var sum float64
	for i := 0; i+1 < len(stream); i++ {
		sum -= m.logProb(stream[i], stream[i+1])
	}
	n := len(stream) - 1
	if res.Tokens != n || res.Examples != d.Len() || math.Abs(res.Loss-sum/float64(n)) > 1e-6 || math.Abs(res.Perplexity-math.Exp(sum/float64(n))) > 1e-6*res.Perplexity {
		t.Errorf("%+v; want %d tokens, loss %v, perplexity %v", res, n, sum/float64(n), math.Exp(sum/float64(n)))
	}
	// 'a'->'b' twice and 'b'->'c' are the bigram's most likely: 3 of 8.
	if res.Accuracy != 3.0/8 {
		t.Errorf("accuracy %v, want 3/8", res.Accuracy)
	}
}

func TestEvaluateClassifier(t *testing.T) {
	m := bigram{context: 3, vocab: 257, classes: 2}
	d, err := data.NewTextDataset([]data.TextDocument{{Text: "a", Label: "1"}, {Text: "b", Label: "0"}}, text.Bytes{},
		data.TextDataOptions{Task: data.Classify, Context: 3, Labels: []string{"0", "1"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := seqtrain.Evaluate(context.Background(), m, d.X, d.Y)
	if err != nil {
		t.Fatal(err)
	}
	// Logits (0, 97) and (0, 98): class 1 both times.
	want := (math.Log1p(math.Exp(-97)) + 98 + math.Log1p(math.Exp(-98))) / 2
	if res.Accuracy != 0.5 || math.Abs(res.Loss-want) > 1e-6 || res.Tokens != 0 || res.Perplexity != 0 {
		t.Errorf("%+v, want accuracy 0.5 loss %v", res, want)
	}
	if _, err := seqtrain.Evaluate(context.Background(), m, d.X[:5], d.Y); err == nil {
		t.Error("a ragged batch accepted")
	}
}
