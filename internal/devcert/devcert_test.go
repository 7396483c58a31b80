package devcert

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestIssueVerifies: an issued certificate verifies against the
// authority for its hosts, as a server and as a client, and not for
// another host or against another authority.
func TestIssueVerifies(t *testing.T) {
	ca, err := NewAuthority("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue("node", []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	for _, c := range []struct {
		host  string
		usage x509.ExtKeyUsage
		ok    bool
	}{
		{"127.0.0.1", x509.ExtKeyUsageServerAuth, true},
		{"localhost", x509.ExtKeyUsageServerAuth, true},
		{"", x509.ExtKeyUsageClientAuth, true},
		{"10.0.0.1", x509.ExtKeyUsageServerAuth, false},
	} {
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: c.host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{c.usage}})
		if (err == nil) != c.ok {
			t.Errorf("host %q usage %v: %v, want ok %v", c.host, c.usage, err, c.ok)
		}
	}
	other, _ := NewAuthority("other", time.Hour)
	otherPool := x509.NewCertPool()
	otherPool.AppendCertsFromPEM(other.PEM)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "127.0.0.1", Roots: otherPool}); err == nil {
		t.Error("verified against another authority")
	}
}

// TestWriteNewRefusesExisting: WriteNew writes keys with mode 0600, and
// refuses, writing nothing, when one file exists.
func TestWriteNewRefusesExisting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := WriteNew(dir, []File{{Name: "a.pem", Data: []byte("a")}, {Name: "k.pem", Data: []byte("k"), Private: true}}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "k.pem")); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a.pem")); fi.Mode().Perm() != 0o644 {
		t.Errorf("certificate mode %v", fi.Mode())
	}
	err := WriteNew(dir, []File{{Name: "b.pem", Data: []byte("b")}, {Name: "a.pem", Data: []byte("x")}})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("%v, want ErrExists", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.pem")); err == nil {
		t.Error("b.pem written though a.pem exists")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.pem")); string(b) != "a" {
		t.Error("a.pem replaced")
	}
}
