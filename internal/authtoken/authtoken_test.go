package authtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testKey(t *testing.T, fill byte) Key {
	t.Helper()
	k, err := ParseKey([]byte(strings.Repeat(fmt.Sprintf("%02x", fill), 32)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestVerify checks that a minted token verifies to its claims, and that
// tokens altered in any byte, signed with another key, expired or with a
// forged role are refused with the right error, which never quotes the
// token.
func TestVerify(t *testing.T) {
	k, other := testKey(t, 1), testKey(t, 2)
	now := time.Unix(1_800_000_000, 0)
	tok, err := k.Mint(Claims{Role: Contributor, Subject: "alice", Expires: now.Unix() + 60})
	if err != nil {
		t.Fatal(err)
	}
	c, err := k.Verify(tok, now)
	if err != nil || c.Role != Contributor || c.Subject != "alice" {
		t.Fatalf("Verify = %+v, %v", c, err)
	}
	if _, err := other.Verify(tok, now); !errors.Is(err, ErrForged) {
		t.Errorf("another key: %v, want ErrForged", err)
	}
	if _, err := k.Verify(tok, now.Add(60*time.Second)); !errors.Is(err, ErrExpired) {
		t.Errorf("at expiry: %v, want ErrExpired", err)
	}
	for i := range len(tok) {
		b := []byte(tok)
		b[i] ^= 1
		_, err := k.Verify(string(b), now)
		if err == nil {
			t.Fatalf("token with byte %d flipped verified", i)
		}
		if strings.Contains(err.Error(), tok[len(prefix):]) {
			t.Fatalf("error quotes the token: %v", err)
		}
	}
	// A forger who edits the claims to operator cannot fix the MAC.
	_, rest, _ := strings.Cut(tok, ".")
	_, sig, _ := strings.Cut(rest, ".")
	forged := prefix + base64.RawURLEncoding.EncodeToString([]byte(`{"role":"operator","exp":1900000000}`)) + "." + sig
	if _, err := k.Verify(forged, now); !errors.Is(err, ErrForged) {
		t.Errorf("edited claims: %v, want ErrForged", err)
	}
	// Correctly signed but with nonsense claims: malformed.
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"role":"root","exp":1900000000}`))
	m := hmac.New(sha256.New, k.b)
	m.Write([]byte(domain + payload))
	if _, err := k.Verify(prefix+payload+"."+base64.RawURLEncoding.EncodeToString(m.Sum(nil)), now); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown role: %v, want ErrMalformed", err)
	}
	for _, bad := range []string{"", "dps1.", "Bearer x", "dps1.e30.", "dps1.e30.!!"} {
		if _, err := k.Verify(bad, now); err == nil {
			t.Errorf("%q verified", bad)
		}
	}
	if _, err := k.Mint(Claims{Role: Contributor, Expires: 1}); err == nil {
		t.Error("minted a contributor token without an id")
	}
	if _, err := k.Mint(Claims{Role: Operator, Subject: "x", Expires: 1}); err == nil {
		t.Error("minted an operator token bound to an id")
	}
	if fmt.Sprint(k) != "authtoken.Key(redacted)" {
		t.Errorf("a key prints as %v", k)
	}
}

// TestKeyFile checks that a key file is written once with mode 0600, read
// back, and refused when others may read it or when it is short.
func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := WriteKeyFile(path); err != nil {
		t.Fatal(err)
	}
	if err := WriteKeyFile(path); err == nil {
		t.Error("overwrote an existing key file")
	}
	k, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := k.Mint(Claims{Role: Operator, Expires: time.Now().Unix() + 10})
	if _, err := k.Verify(tok, time.Now()); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	if _, err := LoadKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key: %v", err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abcd\n"), 0o600)
	if _, err := LoadKey(short); !errors.Is(err, ErrKey) {
		t.Errorf("short key: %v", err)
	}
}
