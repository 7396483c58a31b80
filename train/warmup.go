package train

import (
	"strconv"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Warmup is Optimizer.Warmup: the learning rate rises linearly over the
// first Steps steps, from LearningRate/Steps at step 1 to LearningRate at
// step Steps, then follows the schedule (the cooldown over the last
// CooldownFrac of steps multiplies it where the two overlap). It is part
// of the optimizer's schedule, so a matrix mechanism factorized for the
// optimizer's workload is factorized for the warmed-up rates.
type Warmup struct {
	Steps int
}

// check refuses a warm-up that is not a number of steps of a run of
// steps steps.
func (w *Warmup) check(steps int) error {
	switch {
	case w == nil:
	case w.Steps < 1:
		return invalidf("warm-up of %d steps: want at least 1", w.Steps)
	case w.Steps > steps:
		return invalidf("warm-up of %d steps is longer than the run's %d steps", w.Steps, steps)
	}
	return nil
}

// apply sets the warm-up of s.
func (w *Warmup) apply(s *dpcore.Schedule) {
	if w != nil {
		s.WarmupSteps = w.Steps
	}
}

// setting is the checkpoint's record of the warm-up.
func (w *Warmup) settings() []setting {
	if w == nil {
		return nil
	}
	return []setting{{"warm-up steps", strconv.Itoa(w.Steps)}}
}
