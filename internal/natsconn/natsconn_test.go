package natsconn

import (
	"strings"
	"testing"
)

// TestAuthenticates: a connection authenticates with a token file, a
// credentials file, a client certificate or a user in every URL, and not
// otherwise (a CA alone proves nothing about the client).
func TestAuthenticates(t *testing.T) {
	for _, c := range []struct {
		s    Security
		urls string
		want bool
	}{
		{Security{}, "nats://127.0.0.1:4222", false},
		{Security{CA: "ca.pem"}, "tls://n1:4222", false},
		{Security{}, "nats://u:p@n1:4222,nats://n2:4222", false},
		{Security{}, "nats://u:p@n1:4222,nats://tok@n2:4222", true},
		{Security{TokenFile: "t"}, "nats://n1:4222", true},
		{Security{Creds: "c"}, "nats://n1:4222", true},
		{Security{Cert: "c", Key: "k"}, "nats://n1:4222", true},
	} {
		if got := c.s.Authenticates(c.urls); got != c.want {
			t.Errorf("%+v %s: %v, want %v", c.s, c.urls, got, c.want)
		}
	}
}

func TestLoopbackAndRedact(t *testing.T) {
	for urls, want := range map[string]bool{
		"nats://127.0.0.1:4222": true, "nats://localhost:4222,tls://[::1]:4222": true, "nats://u:p@127.0.0.2:1": true,
		"nats://127.0.0.1:4222,nats://10.0.0.1:4222": false, "tls://n1:4222": false, "nats://0.0.0.0:4222": false,
	} {
		if got := Loopback(urls); got != want {
			t.Errorf("Loopback(%s) = %v", urls, got)
		}
	}
	got := Redact("nats://user:secret@n1:4222,nats://tok3n@n2:4222,nats://n3:4222")
	if strings.Contains(got, "secret") || strings.Contains(got, "tok3n") || strings.Contains(got, "user") || !strings.Contains(got, "n3:4222") {
		t.Errorf("Redact: %s", got)
	}
}

// TestOptionsTokenFile: an empty or missing token file is an error.
func TestOptionsTokenFile(t *testing.T) {
	if _, err := (Security{TokenFile: t.TempDir() + "/none"}).Options(); err == nil {
		t.Error("missing token file accepted")
	}
	opts, err := Security{}.Options()
	if err != nil || len(opts) != 0 {
		t.Fatalf("empty security: %v %v", opts, err)
	}
}
