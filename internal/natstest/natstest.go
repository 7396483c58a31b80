// Package natstest starts NATS servers in the test's process: any
// server (Serve), or one with JetStream on loopback with a test user, or
// a cluster of them whose nodes a test kills and restarts. The tests of
// the replicated service (aggregate/replica, cmd/dpserve) and of the
// workers (train/distributed) share it.
package natstest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// User and Password are the test servers' client credentials (the
// replicated service needs credentials); the URLs returned carry them.
const User, Password = "dpserve", "test-password"

// Serve starts a server with the options o (logging and signals off),
// stopped when the test ends.
func Serve(t testing.TB, o *natsserver.Options) *natsserver.Server {
	t.Helper()
	o.NoLog, o.NoSigs = true, true
	s, err := natsserver.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server did not start")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// Start is one NATS server on loopback with the options o and the test
// credentials, stopped when the test ends; the URL returned carries the
// credentials.
func Start(t testing.TB, o *natsserver.Options) string {
	t.Helper()
	o.Host, o.Port = "127.0.0.1", -1
	o.Username, o.Password = User, Password
	s := Serve(t, o)
	return strings.Replace(s.ClientURL(), "nats://", "nats://"+User+":"+Password+"@", 1)
}

// StartJetStream is one JetStream server on loopback.
func StartJetStream(t testing.TB) string {
	t.Helper()
	return Start(t, &natsserver.Options{JetStream: true, StoreDir: t.TempDir()})
}

// Cluster is a JetStream cluster of in-process servers on loopback.
type Cluster struct {
	t            testing.TB
	dirs         []string
	ports, route []int
	mu           sync.Mutex
	srvs         []*natsserver.Server
}

// FreePort is a TCP port free on 127.0.0.1 now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartCluster starts a cluster of n nodes, stopped when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	c := &Cluster{t: t, srvs: make([]*natsserver.Server, n)}
	for range n {
		c.dirs = append(c.dirs, t.TempDir())
		c.ports = append(c.ports, FreePort(t))
		c.route = append(c.route, FreePort(t))
	}
	for i := range n {
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range n {
			c.Kill(i)
		}
	})
	return c
}

// Start starts node i (again, after Kill: on its data directory).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	var routes []string
	for j, p := range c.route {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		}
	}
	s, err := natsserver.NewServer(&natsserver.Options{
		ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: c.ports[i], NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: c.dirs[i], Username: User, Password: Password,
		Cluster: natsserver.ClusterOpts{Name: "dpserve-test", Host: "127.0.0.1", Port: c.route[i]},
		Routes:  natsserver.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		c.t.Fatalf("nats node %d did not start", i)
	}
	c.mu.Lock()
	c.srvs[i] = s
	c.mu.Unlock()
}

// Kill stops node i at once (its clients see the connection drop).
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	s := c.srvs[i]
	c.srvs[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// URLs is the comma-separated list of the nodes' URLs, with the test
// credentials.
func (c *Cluster) URLs() string {
	var u []string
	for _, p := range c.ports {
		u = append(u, fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", User, Password, p))
	}
	return strings.Join(u, ",")
}
