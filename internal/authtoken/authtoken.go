// Package authtoken mints and verifies the bearer credentials of dpserve:
// a role (contributor or operator), for a contributor the id it is bound
// to, and an expiry, signed with HMAC-SHA256 under a secret key the
// operator keeps in a file. Whoever lacks the key cannot forge or alter a
// token (the MAC is compared in constant time); a token names no key, so
// one key serves one service.
//
// A token is "dps1." + base64url(claims JSON) + "." + base64url(MAC),
// the MAC taken over the domain string "dpserve-token-v1." followed by the
// encoded claims.
package authtoken

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Role is what a token allows.
type Role string

const (
	// Contributor may submit contributions under its own id only.
	Contributor Role = "contributor"
	// Operator may commit steps and read the operator's ledger details
	// and configuration; it cannot contribute.
	Operator Role = "operator"
)

// ParseRole parses "contributor" or "operator".
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case Contributor, Operator:
		return r, nil
	}
	return "", fmt.Errorf("authtoken: %w: role %q (want contributor or operator)", ErrMalformed, s)
}

// Claims is what a token asserts.
type Claims struct {
	Role Role `json:"role"`
	// Subject is the contributor id a contributor token is bound to
	// (empty for an operator).
	Subject string `json:"sub,omitempty"`
	// Expires is the Unix time (seconds) after which the token is refused.
	Expires int64 `json:"exp"`
}

// MinKeyBytes is the shortest key accepted.
const MinKeyBytes = 32

// MaxSubjectBytes bounds a contributor id (as the aggregator does).
const MaxSubjectBytes = 256

// Errors of Verify (errors.Is). A caller answers ErrForged and ErrMalformed
// alike: both mean the token was not made with this key.
var (
	ErrMalformed = errors.New("malformed token")
	ErrForged    = errors.New("token signature does not verify")
	ErrExpired   = errors.New("token expired")
	// ErrKey: a key or key file that cannot be used.
	ErrKey = errors.New("unusable key")
)

const (
	prefix = "dps1."
	domain = "dpserve-token-v1."
)

// Key is a secret signing key.
type Key struct{ b []byte }

// NewKey returns a fresh random key of 32 bytes from crypto/rand.
func NewKey() (Key, error) {
	b := make([]byte, MinKeyBytes)
	if _, err := rand.Read(b); err != nil {
		return Key{}, fmt.Errorf("authtoken: drawing a key: %w", err)
	}
	return Key{b}, nil
}

// ParseKey decodes a key written by Key.MarshalText: hex digits (surrounding
// white space ignored) of at least MinKeyBytes bytes.
func ParseKey(text []byte) (Key, error) {
	b, err := hex.DecodeString(strings.TrimSpace(string(text)))
	if err != nil {
		return Key{}, fmt.Errorf("authtoken: %w: the key must be hex digits", ErrKey)
	}
	if len(b) < MinKeyBytes {
		return Key{}, fmt.Errorf("authtoken: %w: key of %d bytes, want at least %d", ErrKey, len(b), MinKeyBytes)
	}
	return Key{b}, nil
}

// MarshalText encodes the key as hex digits and a newline.
func (k Key) MarshalText() ([]byte, error) {
	return []byte(hex.EncodeToString(k.b) + "\n"), nil
}

// String hides the key (so that printing it by mistake reveals nothing).
func (k Key) String() string { return "authtoken.Key(redacted)" }

// LoadKey reads a key file. A file that group or others may read is
// refused: the key lets its holder act as the operator.
func LoadKey(path string) (Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Key{}, fmt.Errorf("authtoken: key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Key{}, fmt.Errorf("authtoken: %w: key file %s has mode %v: others may read it (chmod 600 %s)", ErrKey, path, fi.Mode().Perm(), path)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("authtoken: key file: %w", err)
	}
	k, err := ParseKey(text)
	if err != nil {
		return Key{}, fmt.Errorf("%w (file %s)", err, path)
	}
	return k, nil
}

// WriteKeyFile writes a fresh key to path with mode 0600; an existing file
// is never overwritten.
func WriteKeyFile(path string) error {
	k, err := NewKey()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("authtoken: %w", err)
	}
	text, _ := k.MarshalText()
	if _, err := f.Write(text); err != nil {
		f.Close()
		return fmt.Errorf("authtoken: writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("authtoken: writing %s: %w", path, err)
	}
	return f.Close()
}

func (k Key) mac(payload string) []byte {
	m := hmac.New(sha256.New, k.b)
	m.Write([]byte(domain))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func (c Claims) check() error {
	switch c.Role {
	case Contributor:
		if c.Subject == "" || len(c.Subject) > MaxSubjectBytes {
			return fmt.Errorf("authtoken: %w: contributor id of %d bytes, want 1..%d", ErrMalformed, len(c.Subject), MaxSubjectBytes)
		}
	case Operator:
		if c.Subject != "" {
			return fmt.Errorf("authtoken: %w: an operator token names no contributor", ErrMalformed)
		}
	default:
		return fmt.Errorf("authtoken: %w: role %q", ErrMalformed, c.Role)
	}
	return nil
}

// Mint signs claims.
func (k Key) Mint(c Claims) (string, error) {
	if len(k.b) < MinKeyBytes {
		return "", fmt.Errorf("authtoken: %w: no key", ErrKey)
	}
	if err := c.check(); err != nil {
		return "", err
	}
	js, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("authtoken: %w", err)
	}
	payload := base64.RawURLEncoding.EncodeToString(js)
	return prefix + payload + "." + base64.RawURLEncoding.EncodeToString(k.mac(payload)), nil
}

// Verify checks a token's MAC in constant time, then its claims and expiry
// at now. The errors never quote the token.
func (k Key) Verify(token string, now time.Time) (Claims, error) {
	var c Claims
	rest, ok := strings.CutPrefix(token, prefix)
	if !ok || len(k.b) < MinKeyBytes {
		return c, fmt.Errorf("authtoken: %w", ErrMalformed)
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return c, fmt.Errorf("authtoken: %w", ErrMalformed)
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return c, fmt.Errorf("authtoken: %w", ErrMalformed)
	}
	if !hmac.Equal(mac, k.mac(payload)) {
		return c, fmt.Errorf("authtoken: %w", ErrForged)
	}
	js, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return c, fmt.Errorf("authtoken: %w", ErrMalformed)
	}
	if err := json.Unmarshal(js, &c); err != nil {
		return Claims{}, fmt.Errorf("authtoken: %w", ErrMalformed)
	}
	if err := c.check(); err != nil {
		return Claims{}, err
	}
	if now.Unix() >= c.Expires {
		return Claims{}, fmt.Errorf("authtoken: %w at %s", ErrExpired, time.Unix(c.Expires, 0).UTC().Format(time.RFC3339))
	}
	return c, nil
}
