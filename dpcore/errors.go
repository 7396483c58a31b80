package dpcore

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every error caused by bad arguments,
// so callers can tell bad input from numerical failure. Errors made by
// Invalidf match it without saying "invalid argument" in their text.
var ErrInvalid = errors.New("invalid argument")

// Invalidf returns a bad-argument error whose message is exactly
// fmt.Errorf(format, args...)'s (a package prefix and what is wrong, as in
// "privacy: bandmf:5000 has 5000 bands, more than the 10 steps") and for
// which errors.Is(err, ErrInvalid) holds; %w verbs wrap as in fmt.Errorf.
// The packages of the module make their bad-argument errors with it, so a
// message carries one prefix per package and no sentinel words.
func Invalidf(format string, args ...any) error {
	return &invalidError{fmt.Errorf(format, args...)}
}

type invalidError struct{ err error }

func (e *invalidError) Error() string        { return e.err.Error() }
func (e *invalidError) Unwrap() error        { return e.err }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }
