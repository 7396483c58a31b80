package accountant

import (
	"errors"

	"github.com/dpmf-go/dpmf/dpcore"
)

var (
	// ErrUnsupported reports an event an accountant cannot account for, such
	// as Poisson subsampling of anything but a single Gaussian mechanism.
	ErrUnsupported = errors.New("unsupported event")
	// ErrInfeasible reports a target guarantee no noise multiplier in the
	// searched range meets.
	ErrInfeasible = errors.New("infeasible privacy target")
)

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("accountant", format, args...)
}

func checkSigma(sigma float64) error {
	if !(sigma > 0) || isInf(sigma) {
		return invalidf("noise multiplier sigma = %v, want finite and > 0", sigma)
	}
	return nil
}

func checkDelta(delta float64) error {
	if !(delta > 0 && delta < 1) {
		return invalidf("delta = %v, want in (0, 1)", delta)
	}
	return nil
}

func checkEps(eps float64) error {
	if !(eps > 0) || isInf(eps) {
		return invalidf("epsilon = %v, want finite and > 0", eps)
	}
	return nil
}

func checkQ(q float64) error {
	if !(q > 0 && q <= 1) {
		return invalidf("sampling rate q = %v, want in (0, 1]", q)
	}
	return nil
}
