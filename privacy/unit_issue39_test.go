package privacy

import (
	"encoding/json"
	"strings"
	"testing"
)

// Issue 39 item 13: a plan's user_bound always states whether the user's
// gradient is a mean; "mean" was left out when false (seen failing).
func TestUserBoundJSONHasMean(t *testing.T) {
	b, err := json.Marshal(UserBound{Examples: 2})
	if err != nil || !strings.Contains(string(b), `"mean":false`) {
		t.Fatalf("%s, %v: want the mean key", b, err)
	}
}
