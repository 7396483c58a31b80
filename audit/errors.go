package audit

import (
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// ErrInvalid is wrapped by every error caused by bad arguments. It is the
// same sentinel as mfnoise.ErrInvalid, so callers test one value.
var ErrInvalid = mfnoise.ErrInvalid

func invalidf(format string, args ...any) error {
	return dpcore.Invalidf("audit: "+format, args...)
}
