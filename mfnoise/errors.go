package mfnoise

import "github.com/dpmf-go/dpmf/dpcore"

// invalidf is a bad-argument error of this package (dpcore.ErrInvalid).
func invalidf(format string, args ...any) error {
	return dpcore.Invalid("mfnoise", format, args...)
}
