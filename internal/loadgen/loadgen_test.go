package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestRefusesNonLoopback(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1:80", "http://example.com", "http://0.0.0.0:1", "::"} {
		_, err := Run(context.Background(), Config{BaseURL: u, Dim: 1, Workers: 1, Requests: 1, Duration: time.Second})
		if err == nil || !strings.Contains(err.Error(), "loopback") && !strings.Contains(err.Error(), "URL") {
			t.Errorf("%s: %v, want a refusal", u, err)
		}
	}
	if err := checkLoopback("http://[::1]:8080"); err != nil {
		t.Error(err)
	}
	if err := checkLoopback("http://127.0.0.1:8080"); err != nil {
		t.Error(err)
	}
}
