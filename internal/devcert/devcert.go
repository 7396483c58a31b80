// Package devcert makes a private certificate authority and certificates
// it signs, to try TLS and mutual TLS on one machine (dpserve cert, dpserve
// cluster). FOR TESTING ONLY: a production service takes its certificates
// from the organisation's authority (or ACME), with keys that never leave
// their machines and are rotated.
package devcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// Authority is a private certificate authority held in memory.
type Authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the authority's certificate, the file clients trust.
	PEM []byte
	// NotAfter ends the validity of the authority and what it signs.
	NotAfter time.Time
}

// Pair is a certificate and its private key, PEM-encoded.
type Pair struct{ Cert, Key []byte }

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// NewAuthority makes an authority named name (its certificate's common
// name, marked "testing only") valid for validFor from now.
func NewAuthority(name string, validFor time.Duration) (*Authority, error) {
	if validFor <= 0 {
		return nil, fmt.Errorf("devcert: validity %v: want a positive duration", validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devcert: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, fmt.Errorf("devcert: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name + " (testing only)", Organization: []string{"dpmf testing only"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devcert: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devcert: %w", err)
	}
	return &Authority{cert: cert, key: key, NotAfter: cert.NotAfter,
		PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Issue signs a certificate for name, valid for the hosts (IP addresses or
// DNS names) as a server and as a client (mutual TLS, NATS routes), until
// the authority expires.
func (a *Authority) Issue(name string, hosts []string) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("devcert: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return Pair{}, fmt.Errorf("devcert: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"dpmf testing only"}},
		NotBefore:    a.cert.NotBefore,
		NotAfter:     a.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return Pair{}, fmt.Errorf("devcert: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("devcert: %w", err)
	}
	return Pair{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}, nil
}

// File is one file WriteNew writes: its name in the directory, its
// content, and whether it is a private key (mode 0600, else 0644).
type File struct {
	Name    string
	Data    []byte
	Private bool
}

// ErrExists is returned by WriteNew when one of the files exists.
var ErrExists = errors.New("exists")

// WriteNew writes the files into dir (created, mode 0700, if missing),
// each atomically, and refuses (ErrExists, nothing written) if any of them
// exists.
func WriteNew(dir string, files []File) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("devcert: %w", err)
	}
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("devcert: %s: %w (remove it, or choose another directory)", p, ErrExists)
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := atomicfile.WriteFile(p, f.Data); err != nil {
			return fmt.Errorf("devcert: %w", err)
		}
		mode := os.FileMode(0o644)
		if f.Private {
			mode = 0o600
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("devcert: %w", err)
		}
	}
	return nil
}
