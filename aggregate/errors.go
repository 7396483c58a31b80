package aggregate

import (
	"errors"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Errors callers branch on (errors.Is). Contribution rejections wrap
// ErrRejected and one of the specific reasons. A configuration that cannot
// be used matches dpcore.ErrInvalid; one the planner refuses is also a
// *privacy.Refusal.
var (
	// ErrRejected is wrapped by every rejected contribution.
	ErrRejected = errors.New("contribution rejected")
	// ErrDimension: the vector does not have length Dim.
	ErrDimension = errors.New("wrong dimension")
	// ErrNotFinite: the vector holds a NaN or an infinity.
	ErrNotFinite = errors.New("non-finite value")
	// ErrContributor: the contributor id is empty or too long.
	ErrContributor = errors.New("bad contributor id")
	// ErrParticipationLimit: the contributor already joined K steps.
	ErrParticipationLimit = errors.New("participation limit reached")
	// ErrSeparation: the contributor joined a step less than B steps ago.
	ErrSeparation = errors.New("too soon after the previous participation")
	// ErrBudgetExhausted: the next release would exceed the privacy
	// budget (the horizon is reached); nothing more is accepted.
	ErrBudgetExhausted = errors.New("privacy budget exhausted")
	// ErrStepFull: the open step's exact sum would overflow 64 bits
	// (more than about 2^32 contributions): commit the step first.
	ErrStepFull = errors.New("step full")
	// ErrNotReleased: no release with that step exists yet.
	ErrNotReleased = errors.New("no such release")
	// ErrClosed: the aggregator is closed, or stopped after a storage
	// failure (reopen it to continue from the durable state).
	ErrClosed = errors.New("aggregator closed")
	// ErrStoreMismatch: the store was created with another configuration.
	ErrStoreMismatch = errors.New("store was created with a different configuration")
)

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("aggregate", format, args...)
}

// RejectError is the error of a rejected contribution.
type RejectError struct {
	Contributor string
	Step        int   // the open step
	Reason      error // ErrDimension, ErrNotFinite, ErrContributor, ErrParticipationLimit, ErrSeparation, ErrBudgetExhausted
	Detail      string
}

func (e *RejectError) Error() string {
	return fmt.Sprintf("aggregate: contribution from %q rejected: %v: %s", e.Contributor, e.Reason, e.Detail)
}

// Unwrap returns ErrRejected and the reason.
func (e *RejectError) Unwrap() []error { return []error{ErrRejected, e.Reason} }

// StoppedError is the error of an aggregator stopped by a storage failure
// Err (reopen the store to continue from its durable state). It matches
// ErrClosed.
type StoppedError struct{ Err error }

func (e *StoppedError) Error() string {
	return fmt.Sprintf("aggregate: %v after a storage failure (reopen the store): %v", ErrClosed, e.Err)
}

// Unwrap returns ErrClosed and the failure.
func (e *StoppedError) Unwrap() []error { return []error{ErrClosed, e.Err} }
