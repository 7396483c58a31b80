package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/natstest"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// openNATS is a NATS server with JetStream, no credentials and no TLS,
// listening on host.
func openNATS(t *testing.T, host string) int {
	t.Helper()
	s := natstest.Serve(t, &natsserver.Options{Host: host, Port: -1, JetStream: true, StoreDir: t.TempDir()})
	return s.Addr().(*net.TCPAddr).Port
}

// runReplicated runs dpserve -nats URL for at most 20 s and returns its
// exit status and standard error.
func runReplicated(t *testing.T, url string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := run(ctx, []string{"-nats", url, "-replicas", "1", "-addr", "127.0.0.1:0", "-dim", "2", "-horizon", "4",
		"-epsilon", "1", "-delta", "1e-6", "-clip", "1", "-work-dir", t.TempDir()}, io.Discard, &stderr)
	return code, stderr.String()
}

// TestReplicatedNeedsCredentials: dpserve -nats without credentials is
// refused at start with one line and exit status 2 (it connected to an
// open NATS server and served: the log holds raw contributions and the
// snapshots the noise state); with a user in the URL it is not refused
// for that.
func TestReplicatedNeedsCredentials(t *testing.T) {
	port := openNATS(t, "127.0.0.1")
	code, stderr := runReplicated(t, fmt.Sprintf("nats://127.0.0.1:%d", port))
	if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "-nats needs credentials") {
		t.Errorf("no credentials: exit %d, %q; want 2 and one line saying -nats needs credentials", code, stderr)
	}
	for _, args := range [][]string{
		{"-nats", "nats://u:p@127.0.0.1:1,nats://127.0.0.1:2"},
		{"-nats", "nats://127.0.0.1:1", "-nats-ca", "ca.pem"},
	} {
		_, err := parseFlags(append(args, "-dim", "2", "-horizon", "4", "-epsilon", "1", "-delta", "1e-6", "-clip", "1"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), "needs credentials") {
			t.Errorf("%v: %v, want the credentials refusal", args, err)
		}
	}
	for _, args := range [][]string{
		{"-nats", "nats://u:p@127.0.0.1:1,nats://tok@127.0.0.1:2"},
		{"-nats", "nats://127.0.0.1:1", "-nats-creds", "x.creds"},
		{"-nats", "nats://127.0.0.1:1", "-nats-cert", "c.pem", "-nats-key", "k.pem"},
	} {
		if _, err := parseFlags(append(args, "-dim", "2", "-horizon", "4", "-epsilon", "1", "-delta", "1e-6", "-clip", "1"), io.Discard); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestReplicatedNeedsTLSOffLoopback: a NATS server reached at an address
// of this machine that is not loopback, with credentials but without TLS,
// is refused at start with one line and exit status 2 (it connected in
// clear). Skipped when the machine has no such address.
func TestReplicatedNeedsTLSOffLoopback(t *testing.T) {
	var host string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			host = n.IP.String()
			break
		}
	}
	if host == "" {
		t.Skip("no non-loopback IPv4 address on this machine")
	}
	s := natstest.Serve(t, &natsserver.Options{Host: host, Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: natstest.User, Password: natstest.Password})
	port := s.Addr().(*net.TCPAddr).Port
	code, stderr := runReplicated(t, fmt.Sprintf("nats://%s:%s@%s:%d", natstest.User, natstest.Password, host, port))
	if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "no TLS") || strings.Contains(stderr, natstest.Password) {
		t.Errorf("%s without TLS: exit %d, %q; want 2 and one line saying the servers offer no TLS (without the password)", host, code, stderr)
	}
}
