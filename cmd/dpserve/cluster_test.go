package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/aggregate/replica"
	"github.com/nats-io/nats.go"
)

// TestClusterCommand starts dpserve cluster (3 nodes, free ports) as the
// command does, and connects with the flags it prints (issue 39 item 15):
// the replicated service sets up its stream with 3 replicas and logs a
// contribution; a client without the client certificate, or one that
// does not trust the cluster's authority, is refused. A second start on
// the same directory keeps the certificates and the log (not under
// -short).
func TestClusterCommand(t *testing.T) {
	dir := t.TempDir()
	start := func() (string, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- clusterCmd(ctx, []string{"-dir", dir, "-nodes", "3", "-port", "0"}, pw, io.Discard)
			pw.Close()
		}()
		sc := bufio.NewScanner(pr)
		var flags string
		for sc.Scan() {
			if f, ok := strings.CutPrefix(sc.Text(), "connect with: "); ok {
				flags = f
				break
			}
		}
		go io.Copy(io.Discard, pr)
		if flags == "" {
			cancel()
			t.Fatalf("no flags printed: %v", <-done)
		}
		return flags, func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	flags, stop := start()
	args := strings.Fields(flags)
	o := replicatedOptions(t, "", append(args, "-replicas", "3")...)
	cfg := nodeConfig(t, o)
	cfg.DecisionWait = 50 * time.Millisecond
	r, nc, err := dialReplicated(context.Background(), o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Add(context.Background(), "u1", []float64{0.1, 0.2})
	var lg *replica.LoggedError
	if !errors.As(err, &lg) || lg.Sequence != 1 {
		t.Fatalf("Add: %v, want logged at sequence 1", err)
	}
	r.Close()
	nc.Close()

	url := args[1]
	if nc, err := nats.Connect(url, nats.RootCAs(filepath.Join(dir, "ca.pem")), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client without the client certificate connected")
	}
	if nc, err := nats.Connect(url, nats.ClientCert(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client that does not trust the cluster's authority connected")
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	stop()
	if testing.Short() {
		return // the restart takes about 10 s more
	}

	flags2, stop2 := start()
	defer stop2()
	ca2, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if string(ca2) != string(ca) || !strings.Contains(flags2, filepath.Join(dir, "client.pem")) {
		t.Fatalf("second start: certificates replaced or flags changed: %s", flags2)
	}
	o2 := replicatedOptions(t, "", append(strings.Fields(flags2), "-replicas", "3")...)
	cfg2 := nodeConfig(t, o2)
	cfg2.DecisionWait = 50 * time.Millisecond
	r2, nc2, err := dialReplicated(context.Background(), o2, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	defer r2.Close()
	// The log kept the first contribution: the next is at sequence 2.
	if _, err = r2.Add(context.Background(), "u2", []float64{0.1, 0.2}); !errors.As(err, &lg) || lg.Sequence != 2 {
		t.Fatalf("Add after restart: %v, want logged at sequence 2", err)
	}
}

// TestCertCommand: dpserve cert writes a certificate that an HTTPS server
// on 127.0.0.1 serves and a client trusting ca.pem accepts, a key file
// of mode 0600; a second run into the same directory is refused with
// status 2 and replaces nothing.
func TestCertCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var out strings.Builder
	if code := run(context.Background(), []string{"cert", "-dir", dir}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(out.String(), "TESTING ONLY") {
		t.Errorf("output does not say it is for testing: %s", out.String())
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key.pem: %v %v, want mode 0600", fi.Mode(), err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get(srv.URL) // https://127.0.0.1:port
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var errOut strings.Builder
	if code := run(context.Background(), []string{"cert", "-dir", dir}, io.Discard, &errOut); code != 2 || !strings.Contains(errOut.String(), "exists") {
		t.Errorf("second run: exit %d, %q; want 2 and exists", code, errOut.String())
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(again) != string(caPEM) {
		t.Error("second run replaced ca.pem")
	}
}
