package text_test

import (
	"fmt"

	"github.com/dpmf-go/dpmf/text"
)

// GPT-2's tokenizer, read from a directory with vocab.json and merges.txt
// (here the part of GPT-2's files that these words use, with their real
// ids).
func ExampleLoadBPE() {
	tok, err := text.LoadBPE("testdata/gpt2")
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := tok.Encode("Hello world")
	s, _ := tok.Decode(ids)
	eos, _ := tok.EOS()
	fmt.Println(ids, s, eos)
	// Output: [15496 995] Hello world 50256
}

func ExamplePretokenize() {
	fmt.Printf("%q\n", text.Pretokenize("I'm here  now"))
	// Output: ["I" "'m" " here" " " " now"]
}

func ExampleNLL() {
	var l text.NLL
	// Two positions of a 2-token vocabulary, each predicting its target
	// with probability 1/2.
	_ = l.AddLogits([]float32{1, 1, 0, 0}, 2, []int{0, 1})
	fmt.Printf("loss %.4f perplexity %.1f\n", l.Loss(), l.Perplexity())
	// Output: loss 0.6931 perplexity 2.0
}
