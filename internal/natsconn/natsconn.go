// Package natsconn holds the NATS client settings that dpserve's replicated
// mode and train's workers share: how a client proves itself to the NATS
// servers, how it checks them, and the rule that it must prove itself.
package natsconn

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Security is a client's credentials: a file holding a NATS token, a NATS
// credentials file, a private CA for the servers' certificates, and a
// client certificate with its key. Empty fields are not used.
type Security struct {
	TokenFile, Creds, CA, Cert, Key string
}

// Authenticates reports whether a client with s proves who it is to the
// servers of urls (a comma-separated list): with a token file, a
// credentials file (JWT and NKey), a client certificate, or a user (a user
// and password, or a token) in every URL. The clients of this module send
// data derived from private data without noise over NATS (train's
// workers: clipped gradient sums; dpserve's replicated log: raw
// contributions and the noise state), so they refuse a connection that
// does not authenticate: anyone who can reach an open server could read
// that data or write into it.
func (s Security) Authenticates(urls string) bool {
	return s.TokenFile != "" || s.Creds != "" || s.Cert != "" || urlsHaveUser(urls)
}

// urlsHaveUser reports whether every URL of a comma-separated list carries
// a user.
func urlsHaveUser(list string) bool {
	for _, u := range strings.Split(list, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.User == nil {
			return false
		}
	}
	return true
}

// Loopback reports whether every URL of a comma-separated list names a
// loopback host (localhost, 127.0.0.0/8, ::1): traffic that never leaves
// the machine.
func Loopback(list string) bool {
	for _, u := range strings.Split(list, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			return false
		}
		host := p.Hostname()
		if ip := net.ParseIP(host); !(host == "localhost" || ip != nil && ip.IsLoopback()) {
			return false
		}
	}
	return true
}

// Options returns the nats.Connect options that apply s; reading the
// token file can fail.
func (s Security) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if s.TokenFile != "" {
		b, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("natsconn: reading the token file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("natsconn: token file %s is empty", s.TokenFile)
		}
		opts = append(opts, nats.Token(tok))
	}
	if s.Creds != "" {
		opts = append(opts, nats.UserCredentials(s.Creds))
	}
	if s.CA != "" {
		opts = append(opts, nats.RootCAs(s.CA))
	}
	if s.Cert != "" {
		opts = append(opts, nats.ClientCert(s.Cert, s.Key))
	}
	return opts, nil
}

// Redact returns a comma-separated list of URLs with the user part of
// each (a password, or a token in the user's place) replaced by
// "REDACTED", for messages and logs.
func Redact(list string) string {
	us := strings.Split(list, ",")
	for i, u := range us {
		p, err := url.Parse(strings.TrimSpace(u))
		switch {
		case err != nil && strings.Contains(u, "@"):
			us[i] = "REDACTED"
		case err == nil && p.User != nil:
			p.User = url.User("REDACTED")
			us[i] = p.String()
		}
	}
	return strings.Join(us, ",")
}
