// Package seqtrain evaluates, and trains in the loop of package train,
// models over token ids: language models that predict the next token at
// every position and sequence classifiers (the transformers of package
// models, an imported GPT-2). Evaluate reports a language model's loss
// per token, its perplexity and next-token accuracy from the model's
// logits.
package seqtrain
