package text

import (
	"errors"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
)

// ErrFormat is wrapped by every error caused by a malformed vocabulary,
// merges or tokenizer.json file.
var ErrFormat = errors.New("malformed tokenizer file")

func formatf(format string, args ...any) error {
	return fmt.Errorf("text: %w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("text", format, args...)
}

// MaxVocab bounds the vocabulary size of a tokenizer read from a file.
// Token ids are carried as float32 features in data sets, exact up to 2^24.
const MaxVocab = 1 << 24

// Tokenizer maps text to token ids in [0, VocabSize()) and back.
type Tokenizer interface {
	// Encode returns the token ids of s. It never fails: every byte
	// sequence has an encoding.
	Encode(s string) []int
	// Decode returns the text of ids; an id outside the vocabulary is an
	// error.
	Decode(ids []int) (string, error)
	// VocabSize is one more than the largest id.
	VocabSize() int
	// EOS is the end-of-text id placed between documents, and whether
	// the tokenizer has one.
	EOS() (id int, ok bool)
}
