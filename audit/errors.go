package audit

import (
	"github.com/dpmf-go/dpmf/dpcore"
)

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("audit", format, args...)
}
