package dpcore

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every error caused by bad arguments,
// so callers can tell bad input from numerical failure. It is the one
// bad-argument sentinel of the module, under this one name: packages make
// their bad-argument errors with Invalid (an *InvalidError) and callers
// test errors.Is(err, dpcore.ErrInvalid).
var ErrInvalid = errors.New("invalid argument")

// InvalidError is a bad-argument error of package Pkg: its text is
// "Pkg: " and the reason, with no sentinel words, and it matches
// ErrInvalid. A caller that adds context of its own reads the reason
// (Reason) instead of cutting the package prefix off the text.
type InvalidError struct {
	// Pkg is the package that refused the argument ("" for none).
	Pkg string
	// Err is the reason; %w verbs of the format wrap as in fmt.Errorf.
	Err error
}

// Invalid returns the bad-argument error of package pkg with the reason
// fmt.Errorf(format, args...): "pkg: reason", as in "privacy: bandmf:5000
// has 5000 bands, more than the 10 steps". Every package of the module
// makes its bad-argument errors with it (through a one-line invalidf).
func Invalid(pkg, format string, args ...any) error {
	return &InvalidError{Pkg: pkg, Err: fmt.Errorf(format, args...)}
}

// Invalidf returns a bad-argument error whose message is exactly
// fmt.Errorf(format, args...)'s and for which errors.Is(err, ErrInvalid)
// holds; %w verbs wrap as in fmt.Errorf. It is Invalid without a package.
func Invalidf(format string, args ...any) error {
	return Invalid("", format, args...)
}

func (e *InvalidError) Error() string {
	if e.Pkg == "" {
		return e.Err.Error()
	}
	return e.Pkg + ": " + e.Err.Error()
}

// Unwrap returns the reason.
func (e *InvalidError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Package is Pkg.
func (e *InvalidError) Package() string { return e.Pkg }

// Reason is the reason without the package: the error's text after "Pkg: ".
func (e *InvalidError) Reason() string { return e.Err.Error() }

// Within is what err says as seen from inside package pkg: its Reason when
// err is a structured error of pkg (an *InvalidError, or any error with
// Package and Reason methods), else its whole text. A package wrapping its
// own error in context keeps one prefix with it ("mfnoise: compare x:
// REASON") without cutting text apart.
func Within(pkg string, err error) string {
	if e, ok := err.(interface {
		Package() string
		Reason() string
	}); ok && e.Package() == pkg {
		return e.Reason()
	}
	return err.Error()
}
