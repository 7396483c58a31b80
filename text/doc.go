// Package text turns text into token ids and back for language models
// trained or fine-tuned privately: GPT-2's byte-level BPE read from a
// Hugging Face-style directory (vocab.json and merges.txt, or
// tokenizer.json), a byte-level tokenizer for models trained from scratch,
// and the next-token loss and perplexity of predicted log-probabilities.
//
// Both tokenizers are lossless: Decode(Encode(s)) == s for every string,
// valid UTF-8 or not, since both work on the string's bytes.
//
// Vocabulary files are untrusted input: they are read through a size
// limit, every id and merge is checked, and a bad file is an error
// wrapping ErrFormat, never a panic or an allocation sized by a number
// the file claims.
package text
