package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"
)

// TestRefusalBranchedOnByType: dpserve tells a plan the planner refused by
// its type (*privacy.Refusal, wrapped or not), not its text, and exits 2:
// the operator changes the flags.
func TestRefusalBranchedOnByType(t *testing.T) {
	r := &privacy.Refusal{Rule: privacy.RuleSensitivity, Reason: "sensitivity 0 is not a positive number"}
	if exitStatus(r) != 2 || exitStatus(fmt.Errorf("open: %w", r)) != 2 {
		t.Error("a refusal does not exit 2")
	}
	if got := exitStatus(errors.New(r.Error())); got != 1 {
		t.Errorf("an error with a refusal's text but not its type: exit %d, want 1", got)
	}
}
