package main

// dpserve cert and dpserve cluster: a certificate and a NATS JetStream
// cluster on loopback, to try TLS, the replicated mode and hand-started
// train workers on one machine. FOR TESTING ONLY (docs/dpserve.md).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dpmf-go/dpmf/internal/devcert"
	natsserver "github.com/nats-io/nats-server/v2/server"
)

// parseSub parses a subcommand's flags: -h is flag.ErrHelp, a bad flag
// or an argument a usage error.
func parseSub(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// certCmd is dpserve cert -dir D [-hosts H,...] [-valid D]: a private
// authority (its key is not kept) and a server certificate it signs, for
// -tls-cert and -tls-key, and the authority's certificate for clients.
func certCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dpserve cert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory to write ca.pem, cert.pem and key.pem into (created; existing files are not replaced)")
	hosts := fs.String("hosts", "127.0.0.1,::1,localhost", "`HOST,...` (IP addresses or DNS names) the certificate is valid for")
	valid := fs.Duration("valid", 30*24*time.Hour, "validity from now")
	if err := parseSub(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usagef("cert: -dir DIR is required")
	}
	if *valid <= 0 {
		return usagef("cert: -valid %v: want a positive duration", *valid)
	}
	ca, err := devcert.NewAuthority("dpserve cert", *valid)
	if err != nil {
		return err
	}
	srv, err := ca.Issue("dpserve", strings.Split(*hosts, ","))
	if err != nil {
		return err
	}
	err = devcert.WriteNew(*dir, []devcert.File{{Name: "ca.pem", Data: ca.PEM}, {Name: "cert.pem", Data: srv.Cert}, {Name: "key.pem", Data: srv.Key, Private: true}})
	if errors.Is(err, devcert.ErrExists) || errors.Is(err, os.ErrPermission) {
		return usagef("cert: %v", err)
	}
	if err != nil {
		return err
	}
	d := *dir
	fmt.Fprintf(stdout, `dpserve cert: FOR TESTING ONLY: a private authority (its key is not kept) and a certificate for %s, valid until %s
  %s        the authority's certificate: what clients trust
  %s, %s  the server's certificate and key (mode 0600)
serve:   dpserve -tls-cert %s -tls-key %s -auth-key auth.key ...
clients: curl --cacert %s https://127.0.0.1:8377/healthz    loadgen -url https://127.0.0.1:8377 -ca %s ...
`, *hosts, ca.NotAfter.UTC().Format(time.RFC3339), filepath.Join(d, "ca.pem"), filepath.Join(d, "cert.pem"), filepath.Join(d, "key.pem"),
		filepath.Join(d, "cert.pem"), filepath.Join(d, "key.pem"), filepath.Join(d, "ca.pem"), filepath.Join(d, "ca.pem"))
	return nil
}

// clusterFiles are the files dpserve cluster keeps in its directory.
var clusterFiles = struct{ ca, server, serverKey, client, clientKey string }{
	"ca.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem"}

// clusterCerts writes the cluster's authority, server and client
// certificates into dir, or keeps those a previous run wrote.
func clusterCerts(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, clusterFiles.ca)); err == nil {
		return nil
	}
	ca, err := devcert.NewAuthority("dpserve cluster", 365*24*time.Hour)
	if err != nil {
		return err
	}
	srv, err := ca.Issue("dpserve cluster node", []string{"127.0.0.1", "::1", "localhost"})
	if err != nil {
		return err
	}
	cl, err := ca.Issue("dpserve cluster client", nil)
	if err != nil {
		return err
	}
	// The authority's certificate is written last: its presence means the
	// others are complete.
	err = devcert.WriteNew(dir, []devcert.File{
		{Name: clusterFiles.server, Data: srv.Cert}, {Name: clusterFiles.serverKey, Data: srv.Key, Private: true},
		{Name: clusterFiles.client, Data: cl.Cert}, {Name: clusterFiles.clientKey, Data: cl.Key, Private: true},
		{Name: clusterFiles.ca, Data: ca.PEM}})
	if errors.Is(err, devcert.ErrExists) || errors.Is(err, os.ErrPermission) {
		return usagef("cluster: %v", err)
	}
	return err
}

// clusterTLS is the TLS configuration of the nodes: their certificate,
// and a client certificate the authority signed required from every
// client and route.
func clusterTLS(dir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, clusterFiles.server), filepath.Join(dir, clusterFiles.serverKey))
	if err != nil {
		return nil, usagef("cluster: %v", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, clusterFiles.ca))
	if err != nil {
		return nil, usagef("cluster: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, usagef("cluster: %s: no PEM certificate in it", filepath.Join(dir, clusterFiles.ca))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, RootCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// freePorts are n ports free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// clusterCmd is dpserve cluster -dir D [-nodes 3] [-port 4222]: NATS
// servers with JetStream on loopback (a cluster of -nodes), TLS and
// client certificates it generates in D, until SIGINT or SIGTERM. It
// prints the flags dpserve -nats and train -nats connect with.
func clusterCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dpserve cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory of the certificates and the JetStream data (created; kept for the next start)")
	nodes := fs.Int("nodes", 3, "NATS servers (1 to 5; 3 survives the loss of one)")
	port := fs.Int("port", 4222, "client port of the first node (the next nodes: the next ports; routes from port+2000); 0: free ports")
	if err := parseSub(fs, args); err != nil {
		return err
	}
	switch {
	case *dir == "":
		return usagef("cluster: -dir DIR is required")
	case *nodes < 1 || *nodes > 5:
		return usagef("cluster: -nodes %d: want 1 to 5", *nodes)
	case *port < 0 || *port+2000+*nodes > 65535:
		return usagef("cluster: -port %d: want 0 (free ports) or a port with room for the nodes and their routes", *port)
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return usagef("cluster: %v", err)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return usagef("cluster: %v", err)
	}
	// The work directories of two dpserve nodes, as the printed commands
	// name them.
	for _, w := range []string{"work1", "work2"} {
		if err := os.MkdirAll(filepath.Join(abs, w), 0o700); err != nil {
			return usagef("cluster: %v", err)
		}
	}
	if err := clusterCerts(abs); err != nil {
		return err
	}
	tlsCfg, err := clusterTLS(abs)
	if err != nil {
		return err
	}
	ports := make([]int, 2**nodes)
	if *port == 0 {
		if ports, err = freePorts(2 * *nodes); err != nil {
			return err
		}
	} else {
		for i := range *nodes {
			ports[i], ports[*nodes+i] = *port+i, *port+2000+i
		}
	}
	client, route := ports[:*nodes], ports[*nodes:]
	var srvs []*natsserver.Server
	defer func() {
		for _, s := range srvs {
			s.Shutdown()
		}
		for _, s := range srvs {
			s.WaitForShutdown()
		}
	}()
	var urls []string
	for i := range *nodes {
		o := &natsserver.Options{ServerName: "dpserve-n" + strconv.Itoa(i), Host: "127.0.0.1", Port: client[i], NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: filepath.Join(abs, "n"+strconv.Itoa(i)),
			TLS: true, TLSVerify: true, TLSConfig: tlsCfg.Clone(), TLSTimeout: 5,
			MaxPayload: 32 << 20, MaxPending: 256 << 20}
		if *nodes > 1 {
			var routes []string
			for j, p := range route {
				if j != i {
					routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
				}
			}
			o.Cluster = natsserver.ClusterOpts{Name: "dpserve-cluster", Host: "127.0.0.1", Port: route[i], TLSConfig: tlsCfg.Clone(), TLSTimeout: 5}
			o.Routes = natsserver.RoutesFromStr(strings.Join(routes, ","))
		}
		s, err := natsserver.NewServer(o)
		if err != nil {
			return fmt.Errorf("cluster: node %d: %w", i, err)
		}
		srvs = append(srvs, s)
		go s.Start()
		urls = append(urls, fmt.Sprintf("tls://127.0.0.1:%d", client[i]))
	}
	for i, s := range srvs {
		if !s.ReadyForConnections(30 * time.Second) {
			return fmt.Errorf("cluster: node %d did not accept connections on 127.0.0.1:%d within 30 s (is the port taken? -port 0 picks free ports)", i, client[i])
		}
	}
	conn := fmt.Sprintf("-nats %s -nats-ca %s -nats-cert %s -nats-key %s", strings.Join(urls, ","),
		filepath.Join(abs, clusterFiles.ca), filepath.Join(abs, clusterFiles.client), filepath.Join(abs, clusterFiles.clientKey))
	fmt.Fprintf(stdout, `dpserve cluster: FOR TESTING ONLY: %d NATS node(s) with JetStream on loopback, TLS and client certificates in %s (SIGINT or SIGTERM stops them; the data stays for the next start)
connect with: %s
replicated service (a second front-end and standby: -work-dir %s -addr 127.0.0.1:8378):
  dpserve %s -replicas %d -work-dir %s -addr 127.0.0.1:8377 -dim 100 -mechanism tree-online -epsilon 1 -delta 1e-6 -horizon 1024 -clip 1
hand-started workers:
  train worker -shard 0/2 %s -data ... ; train worker -shard 1/2 ...
  train run -workers 2 %s -data ... -epsilon 3 -steps 1000
`, *nodes, abs, conn, filepath.Join(abs, "work2"), conn, min(*nodes, 3), filepath.Join(abs, "work1"), conn, conn)
	<-ctx.Done()
	fmt.Fprintln(stdout, "dpserve cluster: stopping")
	return nil
}
