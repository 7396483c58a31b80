// Command loadgen sends a bounded load of contributions to a dpserve
// instance on a loopback address and prints the sustained contributions per
// second and the p50/p99 latency of the durable acknowledgements.
//
//	go run ./cmd/dpserve/loadgen -url http://127.0.0.1:8377 -dim 100 -workers 64 -n 20000 -duration 20s
//
// -url takes several front-ends of a replicated service, separated by
// commas: clients start spread over them and move to the next after a
// failure. A contribution whose request fails (no connection or answer,
// 5xx, 429) is sent again with the same Idempotency-Key, which the
// replicated mode counts once. At the end of -duration no new one is
// started and those in flight are waited for (and retried) for at most
// -drain. A 202 answer (replicated mode: logged, step not yet decided)
// is accepted, and reported as "logged".
//
// Against a server with -tls-cert and -auth-key, give -url https://...,
// -ca CERT.pem (the certificate to trust) and -auth-key KEY (loadgen mints
// a contributor token for each id it sends and an operator token for its
// commits). -acks FILE writes one JSON line {"contributor": ID, "step": T}
// per acknowledged contribution ({"contributor": ID, "sequence": N} for
// a 202, the log position); -json prints the result with snake_case
// keys and durations in seconds. A client backs off (10 ms doubling to
// 1 s) after a failed request.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/dpmf-go/dpmf/internal/authtoken"
	"github.com/dpmf-go/dpmf/internal/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// exitError is an error with its exit status: 2 for what the user fixes
// on the command line, 1 otherwise.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return exitError{code, "loadgen: " + fmt.Sprintf(format, args...)}
}

// run is loadgen with its arguments; errors are one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := runLoad(ctx, args, stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	if !strings.HasPrefix(msg, "loadgen: ") {
		msg = "loadgen: " + msg
	}
	fmt.Fprintln(stderr, msg)
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg loadgen.Config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	urls := fs.String("url", "http://127.0.0.1:8377", "dpserve base `URL,...` (loopback only; several front-ends of a replicated service: failover)")
	fs.IntVar(&cfg.Dim, "dim", 100, "vector dimension (the server's -dim)")
	fs.IntVar(&cfg.Workers, "workers", 64, "concurrent clients")
	fs.IntVar(&cfg.Requests, "n", 20000, "most contributions to send")
	fs.DurationVar(&cfg.Duration, "duration", 20*time.Second, "most time to start contributions in")
	fs.DurationVar(&cfg.Drain, "drain", 10*time.Second, "most time to wait after -duration for the answers to those in flight")
	fs.DurationVar(&cfg.CommitEvery, "commit-every", 0, "commit a step at this interval (0: never)")
	fs.StringVar(&cfg.IDPrefix, "id-prefix", fmt.Sprintf("load-%d-", time.Now().UnixNano()), "contributor id prefix")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	acks := fs.String("acks", "", "write the acknowledged (contributor, step) pairs to this file, one JSON line each")
	keyFile := fs.String("auth-key", "", "the server's -auth-key file: mint contributor and operator tokens")
	caFile := fs.String("ca", "", "PEM certificate to trust for an https -url")
	// The flag package would print the error and the whole usage; -h
	// prints the usage alone.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "Usage of loadgen:")
			fs.PrintDefaults()
			return err
		}
		return fail(2, "%v (loadgen -h lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q", fs.Arg(0))
	}
	for _, u := range strings.Split(*urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			cfg.URLs = append(cfg.URLs, strings.TrimRight(u, "/"))
		}
	}
	if len(cfg.URLs) == 0 {
		return fail(2, "-url: no URL")
	}
	if cfg.Drain <= 0 {
		return fail(2, "-drain %v: want a positive duration", cfg.Drain)
	}
	if err := cfg.Check(); err != nil {
		return exitError{2, err.Error()}
	}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return fail(2, "-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fail(2, "-ca %s: no PEM certificate in it", *caFile)
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if *keyFile != "" {
		key, err := authtoken.LoadKey(*keyFile)
		if err != nil {
			return fail(2, "-auth-key: %v", err)
		}
		exp := time.Now().Add(cfg.Duration + time.Hour).Unix()
		cfg.ContributorToken = func(id string) string {
			tok, _ := key.Mint(authtoken.Claims{Role: authtoken.Contributor, Subject: id, Expires: exp})
			return tok
		}
		if cfg.OperatorToken, err = key.Mint(authtoken.Claims{Role: authtoken.Operator, Expires: exp}); err != nil {
			return fail(2, "-auth-key: %v", err)
		}
	}
	var ackFile *os.File
	var ackBuf *bufio.Writer
	if *acks != "" {
		f, err := os.Create(*acks)
		if err != nil {
			return fail(2, "-acks: %v", err)
		}
		ackFile, ackBuf = f, bufio.NewWriter(f)
		cfg.Acks = ackBuf
	}
	res, err := loadgen.Run(ctx, cfg)
	if ackFile != nil {
		if err := ackBuf.Flush(); err != nil {
			return fail(1, "-acks: %v", err)
		}
		if err := ackFile.Close(); err != nil {
			return fail(1, "-acks: %v", err)
		}
	}
	if err != nil {
		return err // it starts with "loadgen: "
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "d=%d workers=%d: %s\n", cfg.Dim, cfg.Workers, res)
	return nil
}
