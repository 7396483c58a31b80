package train

import (
	"errors"

	"github.com/dpmf-go/dpmf/dpcore"
)

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("train", format, args...)
}

// ErrInterrupted is wrapped by the error Run returns when its context is
// cancelled (SIGINT, SIGTERM) between steps; the error says whether a
// checkpoint was saved at the interrupt and from which step the run resumes.
var ErrInterrupted = errors.New("interrupted")

// ErrBroken is wrapped by every call on a Trainer whose last step failed
// after its noise was drawn: sampler and noise advanced but the model did
// not, so the trainer refuses to go on until it is rebuilt (New) from a
// checkpoint. Only an arithmetic overflow in the noisy sum can cause it;
// every earlier failure (data, clipping, context) rolls the step back.
var ErrBroken = errors.New("trainer broken by a failed step")

// ErrCorruptCheckpoint is wrapped when a checkpoint fails its checksum or
// does not belong to the configured run.
var ErrCorruptCheckpoint = errors.New("corrupt or mismatched checkpoint")

// ErrDiverged is wrapped when a step's update or the parameters it leaves
// are not finite: the learning rate (or, with no clipping, the gradients)
// is too large for the model. The trainer is then broken (ErrBroken): the
// last checkpoint is the state to resume or retune from.
var ErrDiverged = errors.New("the model diverged")
