package main

// Replicated mode (-nats URL,...): the service on a NATS JetStream
// cluster, run by package aggregate/replica; this file connects to the
// cluster and serves a node of it.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/aggregate/replica"
	"github.com/dpmf-go/dpmf/internal/buildinfo"
	"github.com/dpmf-go/dpmf/internal/natsconn"
	"github.com/nats-io/nats.go"
)

// connectNATS connects to the cluster -nats names with the node's
// credentials. Off this machine the log's raw contributions and the noise
// state travel over the network: TLS is required, the servers'
// certificates checked (-nats-ca, or the system's roots).
func connectNATS(o options, id string) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("dpserve " + id), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second)}
	sec, err := o.natsSecurity().Options()
	if err != nil {
		return nil, usageError{err.Error()}
	}
	opts = append(opts, sec...)
	if !natsconn.Loopback(o.nats) {
		opts = append(opts, nats.Secure())
	}
	nc, err := nats.Connect(o.nats, opts...)
	if errors.Is(err, nats.ErrSecureConnWanted) {
		return nil, usagef("-nats %s: the servers offer no TLS, which a NATS server off this machine needs (its traffic holds the raw contributions and the noise state): configure tls on the servers", natsconn.Redact(o.nats))
	}
	if err != nil {
		return nil, usagef("-nats %s: %v", natsconn.Redact(o.nats), err)
	}
	return nc, nil
}

// replicaConfig is the configuration of a node under the flags, with the
// engine's configuration agg (checkRelease).
func replicaConfig(o options, agg aggregate.Config) replica.Config {
	return replica.Config{Service: o.service, Aggregate: agg, Replicas: o.replicas, LeaseTTL: o.leaseTTL,
		LogMaxAge: o.logMaxAge, CommitEvery: o.commitEvery, WorkDir: o.workDir, ID: replica.NewID()}
}

// dialReplicated connects to the cluster and starts a node of the
// replicated service cfg on it; the caller closes the node, then the
// connection.
func dialReplicated(ctx context.Context, o options, cfg replica.Config) (*replica.Node, *nats.Conn, error) {
	nc, err := connectNATS(o, cfg.ID)
	if err != nil {
		return nil, nil, err
	}
	r, err := replica.New(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return r, nc, nil
}

// serveReplicated is serve for -nats.
func serveReplicated(ctx context.Context, o options, tlsCfg *tls.Config, acc access, stdout, stderr io.Writer) error {
	agg, err := checkRelease(ctx, o)
	if err != nil {
		return err
	}
	ln, err := listener(o, tlsCfg != nil, acc.key != nil)
	if err != nil {
		return err
	}
	defer ln.Close()
	cfg := replicaConfig(o, agg)
	cfg.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, "dpserve: "+format+"\n", args...) }
	r, nc, err := dialReplicated(ctx, o, cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	defer r.Close()
	actx, stopAgg := context.WithCancel(ctx)
	aggDone := make(chan struct{})
	if o.aggregator {
		go func() { defer close(aggDone); r.RunAggregator(actx) }()
	} else {
		close(aggDone)
	}
	hc := handlerConfig{maxBody: o.maxBody, inflight: o.inflight, access: acc, config: map[string]any{
		"addr": ln.Addr().String(), "tls": tlsCfg != nil, "credentials": acc.key != nil,
		"rate_per_contributor": o.rate, "burst": o.burst, "nats": natsconn.Redact(o.nats), "service": o.service, "replicas": o.replicas,
		"aggregator": o.aggregator, "lease_ttl_seconds": o.leaseTTL.Seconds(), "dim": o.dim, "mechanism": o.mechanism,
		"workload": o.workload, "horizon": o.horizon, "epsilon": o.epsilon, "delta": o.delta, "clip": o.clip,
		"k": o.k, "b": o.b, "count": o.count, "seeded": o.seed != "", "commit_every_seconds": o.commitEvery.Seconds(),
		"max_body": o.maxBody, "max_inflight": o.inflight, "noise_memory": o.noiseMemory,
		"version": buildinfo.Read().String(),
	}}
	srv := &http.Server{Handler: newHandler(r, hc), TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second}
	srv.ErrorLog = connLog()
	if o.seed != "" {
		fmt.Fprintln(stderr, "dpserve: WARNING: -seed fixes the noise; releases are not private (tests only)")
	}
	if acc.key == nil {
		fmt.Fprintln(stderr, "dpserve: no -auth-key: every caller that reaches this loopback port acts as the operator")
	}
	fmt.Fprintf(stdout, "dpserve: listening on %s (replicated: %s, service %s)\n", ln.Addr(), natsconn.Redact(o.nats), o.service)
	errc := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			errc <- srv.ServeTLS(ln, "", "")
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		stopAgg()
		<-aggDone
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// The aggregator stops first and gives its lease up (RunAggregator),
	// so that a standby takes over while this front-end finishes the
	// requests it has: those waiting for a decision get it from the new
	// leader, or 202 (logged) once no leader is heard.
	stopAgg()
	<-aggDone
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(stdout, "dpserve: stopped")
	return nil
}
