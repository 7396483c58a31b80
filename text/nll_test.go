package text

import (
	"math"
	"testing"
)

func TestNLL(t *testing.T) {
	var l NLL
	// Uniform logits over 4 tokens: loss log 4, perplexity 4.
	if err := l.AddLogits([]float32{0, 0, 0, 0, 5, 5, 5, 5}, 4, []int{2, 0}); err != nil {
		t.Fatal(err)
	}
	if math.Abs(l.Loss()-math.Log(4)) > 1e-12 || math.Abs(l.Perplexity()-4) > 1e-12 {
		t.Errorf("uniform: loss %v perplexity %v, want log 4 and 4", l.Loss(), l.Perplexity())
	}
	// Logits (0, ln 3): p = 1/4, 3/4; a padding target (-1) is skipped.
	var m NLL
	if err := m.AddLogits([]float32{0, float32(math.Log(3)), 9, 9}, 2, []int{1, -1}); err != nil {
		t.Fatal(err)
	}
	if m.Tokens != 1 || math.Abs(m.Sum-math.Log(4.0/3)) > 1e-7 {
		t.Errorf("sum %v over %d tokens, want log(4/3) over 1", m.Sum, m.Tokens)
	}
	// Large logits do not overflow (log-sum-exp is shifted).
	var big NLL
	if err := big.AddLogits([]float32{1e30, 1e30}, 2, []int{0}); err != nil || math.Abs(big.Loss()-math.Log(2)) > 1e-12 {
		t.Errorf("large logits: %v, %v", big.Loss(), err)
	}
	for _, c := range []struct {
		logits  []float32
		vocab   int
		targets []int
	}{
		{[]float32{0, 0}, 2, []int{2}},
		{[]float32{0, 0, 0}, 2, []int{1}},
		{[]float32{float32(math.NaN()), 0}, 2, []int{1}},
		{[]float32{float32(math.Inf(1)), 0}, 2, []int{1}},
		{nil, 0, nil},
	} {
		var e NLL
		if err := e.AddLogits(c.logits, c.vocab, c.targets); err == nil || e.Tokens != 0 {
			t.Errorf("AddLogits(%v, %d, %v) = %v with %d tokens, want an error and none", c.logits, c.vocab, c.targets, err, e.Tokens)
		}
	}
	if !math.IsNaN(NLL{}.Loss()) {
		t.Error("empty loss is not NaN")
	}
}

func TestLogSoftmax(t *testing.T) {
	dst := make([]float64, 3)
	if err := LogSoftmax(dst, []float32{0, float32(math.Log(2)), float32(math.Log(5))}); err != nil {
		t.Fatal(err)
	}
	for i, p := range []float64{1.0 / 8, 2.0 / 8, 5.0 / 8} {
		if math.Abs(dst[i]-math.Log(p)) > 1e-7 {
			t.Errorf("dst[%d] = %v, want log %v", i, dst[i], p)
		}
	}
	if err := LogSoftmax(dst, []float32{0, float32(math.Inf(-1)), 1}); err == nil {
		t.Error("-Inf logit accepted")
	}
	if err := LogSoftmax(dst[:2], []float32{0, 1, 2}); err == nil {
		t.Error("length mismatch accepted")
	}
}
