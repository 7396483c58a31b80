package seqtrain_test

import (
	"context"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/seqtrain"
	"github.com/dpmf-go/dpmf/seqtrain/seqtest"
	"github.com/dpmf-go/dpmf/text"
)

// TestEvaluateNextToken checks the loss, perplexity and accuracy on packed
// documents against the bigram's log-probabilities summed by hand over
// every (token, next token) pair of the stream.
func TestEvaluateNextToken(t *testing.T) {
	m := &seqtest.Bigram{Ctx: 4, V: 257}
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
		sum -= m.LogProbs(stream[i])[stream[i+1]]
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
	m := &seqtest.Bigram{Ctx: 3, V: 257, K: 2}
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
