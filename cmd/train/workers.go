package main

// Training across workers (-workers, train worker): package
// train/distributed over NATS. train run -workers W without -nats starts a
// loopback NATS server and W worker processes itself; with -nats it
// coordinates workers started elsewhere with train worker.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dpmf-go/dpmf/internal/natsconn"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/train"
	"github.com/dpmf-go/dpmf/train/distributed"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsFlags connect to NATS, authenticated.
type natsFlags struct {
	url, tokenFile, creds, ca, cert, key string
	run                                  string
	requestTimeout, wait                 time.Duration
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.url, "nats", "", "NATS URL,... of the workers' server (train run -workers: without it a loopback server and the worker processes are started here)")
	fs.StringVar(&n.tokenFile, "nats-token-file", "", "file holding the NATS authentication token")
	fs.StringVar(&n.creds, "nats-creds", "", "NATS credentials file (JWT and NKey)")
	fs.StringVar(&n.ca, "nats-ca", "", "PEM CA certificates that sign the NATS servers' TLS certificates")
	fs.StringVar(&n.cert, "nats-cert", "", "PEM client certificate for NATS mutual TLS (with -nats-key)")
	fs.StringVar(&n.key, "nats-key", "", "PEM private key of -nats-cert")
	fs.StringVar(&n.run, "run-name", "train", "name of the run on the NATS server (coordinator and workers must agree; letters, digits, - and _)")
	fs.DurationVar(&n.requestTimeout, "worker-timeout", 10*time.Second, "silence after which a worker's step is asked again (a computing worker sends 4 heartbeats a second; at least 1s)")
	fs.DurationVar(&n.wait, "worker-wait", time.Minute, "how long a step keeps asking a worker that does not answer before the run stops with a checkpoint")
}

// natsOnlyFlags are the flags of the connection, not of the run.
var natsOnlyFlags = []string{"nats", "nats-token-file", "nats-creds", "nats-ca", "nats-cert", "nats-key", "run-name", "worker-timeout", "worker-wait"}

func (n *natsFlags) validate() error {
	if n.url == "" {
		return usagef("-nats URL is required")
	}
	if n.tokenFile == "" && n.creds == "" && n.cert == "" && !urlHasUser(n.url) {
		return usagef("-nats needs credentials (-nats-token-file, -nats-creds, -nats-cert or user:password@ in the URL): the workers send clipped gradient sums, which are derived from the private data without noise")
	}
	if (n.cert == "") != (n.key == "") {
		return usagef("-nats-cert and -nats-key go together")
	}
	if n.requestTimeout < time.Second || n.wait <= 0 {
		return usagef("-worker-timeout %v must be at least 1s and -worker-wait %v positive", n.requestTimeout, n.wait)
	}
	return nil
}

func (n *natsFlags) options(workers int) distributed.Options {
	return distributed.Options{Run: n.run, Workers: workers, RequestTimeout: n.requestTimeout, Wait: n.wait}
}

func (n *natsFlags) connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond), nats.Timeout(5 * time.Second)}, extra...)
	if n.tokenFile != "" {
		b, err := os.ReadFile(n.tokenFile)
		if err != nil {
			return nil, usagef("-nats-token-file: %v", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return nil, usagef("-nats-token-file %s is empty", n.tokenFile)
		}
		opts = append(opts, nats.Token(tok))
	}
	opts = append(opts, natsconn.Security{Creds: n.creds, CA: n.ca, Cert: n.cert, Key: n.key}.Options()...)
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		return nil, usagef("-nats %s: %v", n.url, err)
	}
	return nc, nil
}

// workerFlags are the flags -workers adds to train run.
type workerFlags struct {
	workers int
	nats    natsFlags
}

func (w *workerFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&w.workers, "workers", 0, "train on W worker processes, each holding 1/W of the training data, with this process adding the noise (0: in this process; README, docs/deployment.md)")
	w.nats.register(fs)
}

// check refuses, before any data is read, worker flags that cannot run:
// a negative -workers, connection flags without -workers or -nats, and
// -worker-timeout below 1s (with local workers too).
func (w *workerFlags) check(fs *flag.FlagSet) error {
	if w.workers < 0 {
		return usagef("-workers %d: want 0 (this process) or more", w.workers)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if w.workers == 0 {
		for _, f := range natsOnlyFlags {
			if set[f] {
				return usagef("-%s needs -workers", f)
			}
		}
		return nil
	}
	if w.nats.url != "" {
		return w.nats.validate()
	}
	for _, f := range natsOnlyFlags[1:6] {
		if set[f] {
			return usagef("-%s needs -nats (without it the workers run here on a loopback server with a fresh token)", f)
		}
	}
	if w.nats.requestTimeout < time.Second || w.nats.wait <= 0 {
		return usagef("-worker-timeout %v must be at least 1s and -worker-wait %v positive", w.nats.requestTimeout, w.nats.wait)
	}
	return nil
}

// train runs cfg: in this process, or on -workers workers.
func (w *workerFlags) train(ctx context.Context, cfg train.Config, fs *flag.FlagSet, log, stderr io.Writer) (*train.Result, error) {
	if w.workers < 0 || w.workers > cfg.Train.Len() {
		return nil, usagef("-workers %d: want 0 (this process) to %d (the training examples)", w.workers, cfg.Train.Len())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if w.workers == 0 {
		for _, f := range natsOnlyFlags {
			if set[f] {
				return nil, usagef("-%s needs -workers", f)
			}
		}
		return train.Run(ctx, cfg)
	}
	// What the coordinator would refuse is refused before any worker is
	// started (each would print its own refusal).
	if err := distributed.Check(cfg, w.workers); err != nil {
		return nil, err
	}
	if w.nats.url != "" {
		if err := w.nats.validate(); err != nil {
			return nil, err
		}
		nc, err := w.nats.connect("dpmf train coordinator")
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		fmt.Fprintf(log, "workers: %d (train worker -shard i/%d, run %q on %s)\n", w.workers, w.workers, w.nats.run, w.nats.url)
		fmt.Fprintln(log, workersAssume)
		return distributed.Run(ctx, nc, cfg, w.nats.options(w.workers))
	}
	for _, f := range natsOnlyFlags[1:6] {
		if set[f] {
			return nil, usagef("-%s needs -nats (without it the workers run here on a loopback server with a fresh token)", f)
		}
	}
	return w.local(ctx, cfg, fs, log, stderr)
}

// workersAssume is what the plan's guarantee assumes of a run on workers
// beyond a run in one process (the plan itself is the same).
const workersAssume = "  assumes: the workers and the NATS servers are trusted as this process is: the workers' clipped gradient sums (and a digest of each shard) reach this process without noise, over authenticated NATS; the noise is added here"

// coordinatorOnlyFlags are flags of train run a worker does not take.
var coordinatorOnlyFlags = map[string]bool{"workers": true, "json": true, "checkpoint": true, "checkpoint-every": true,
	"metrics": true, "save-model": true, "plot": true, "config": true, "cache": true, "eval-every": true,
	"seed": true, "insecure-seed": true} // the seed is the noise's secret; a worker needs none

// local trains on w.workers worker processes of this program, on a
// loopback NATS server with a fresh token, and stops them at the end.
func (w *workerFlags) local(ctx context.Context, cfg train.Config, fs *flag.FlagSet, log, stderr io.Writer) (*train.Result, error) {
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(tok)
	dir, err := os.MkdirTemp("", "dpmf-workers-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return nil, err
	}
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Authorization: token, MaxPayload: 32 << 20, MaxPending: 256 << 20})
	if err != nil {
		return nil, fmt.Errorf("workers: starting the loopback NATS server: %w", err)
	}
	go srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(30 * time.Second) {
		return nil, errors.New("workers: the loopback NATS server did not start within 30 s")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	var args []string
	fs.Visit(func(f *flag.Flag) {
		if !coordinatorOnlyFlags[f.Name] && !contains(natsOnlyFlags, f.Name) {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	args = append(args, "-nats", srv.ClientURL(), "-nats-token-file", tokenFile, "-run-name", w.nats.run, "-exit-on-disconnect")
	procs := &localWorkers{}
	defer procs.stop()
	fmt.Fprintf(log, "workers: %d local processes on %s\n", w.workers, srv.ClientURL())
	fmt.Fprintln(log, workersAssume)
	for i := range w.workers {
		if err := procs.start(ctx, exe, append([]string{"worker", "-shard", fmt.Sprintf("%d/%d", i, w.workers)}, args...), stderr); err != nil {
			return nil, err
		}
	}
	if err := procs.ready(ctx, w.nats.wait+5*time.Minute); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.Token(token), nats.Name("dpmf train coordinator"))
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	defer nc.Close()
	res, err := distributed.Run(ctx, nc, cfg, w.nats.options(w.workers))
	if err == nil {
		procs.wait(10 * time.Second)
	}
	return res, err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// localWorkers are the worker processes of train run -workers.
type localWorkers struct {
	mu     sync.Mutex
	cmds   []*exec.Cmd
	readyc chan error
	exited []chan struct{}
}

func (p *localWorkers) start(ctx context.Context, exe string, args []string, stderr io.Writer) error {
	if p.readyc == nil {
		p.readyc = make(chan error, 1024)
	}
	c := exec.Command(exe, args...)
	out, err := c.StdoutPipe()
	if err != nil {
		return err
	}
	errp, err := c.StderrPipe()
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return fmt.Errorf("workers: %w", err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmds = append(p.cmds, c)
	p.exited = append(p.exited, done)
	p.mu.Unlock()
	var lines sync.WaitGroup
	lines.Add(2)
	go func() {
		defer lines.Done()
		sc := bufio.NewScanner(errp)
		for sc.Scan() {
			fmt.Fprintln(stderr, sc.Text())
		}
	}()
	go func() {
		defer lines.Done()
		sc := bufio.NewScanner(out)
		ready := false
		for sc.Scan() {
			if !ready && strings.HasPrefix(sc.Text(), "worker ") && strings.Contains(sc.Text(), " ready") {
				ready = true
				p.readyc <- nil
			}
		}
		if !ready {
			p.readyc <- errors.New("workers: a worker process exited before it was ready (its error is above)")
		}
	}()
	go func() {
		lines.Wait()
		c.Wait()
		close(done)
	}()
	return nil
}

// ready waits until every worker listens.
func (p *localWorkers) ready(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for range p.cmds {
		select {
		case err := <-p.readyc:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("train: %w before the first step (while starting the workers; nothing to save): %w", train.ErrInterrupted, ctx.Err())
		case <-t.C:
			return fmt.Errorf("workers: not all %d workers were ready within %v", len(p.cmds), timeout)
		}
	}
	return nil
}

// wait gives the workers, told that the run is over, time to exit.
func (p *localWorkers) wait(timeout time.Duration) {
	deadline := time.After(timeout)
	for _, d := range p.exited {
		select {
		case <-d:
		case <-deadline:
			return
		}
	}
}

// stop kills the workers still running and reaps them.
func (p *localWorkers) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.cmds {
		select {
		case <-p.exited[i]:
		default:
			c.Process.Kill()
			<-p.exited[i]
		}
	}
}

// runWorker is "train worker": one shard's clipped gradient sums for a
// run coordinated by train run -workers W -nats URL.
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("worker", stderr)
	var wf workerCmdFlags
	wf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if wf.r.config != "" {
		if err := applyConfigFile(fs, wf.r.config); err != nil {
			return err
		}
	}
	if *wf.shard == "" {
		return usagef("-shard i/W is required")
	}
	shard, err := distributed.ParseShard(*wf.shard)
	if err != nil {
		return usagef("-shard %q: want i/W with 0 <= i < W", *wf.shard)
	}
	if err := wf.nf.validate(); err != nil {
		return err
	}
	cfg, err := wf.trainConfig(fs)
	if err != nil {
		return err
	}
	return wf.serve(ctx, cfg, shard, stdout)
}

// workerCmdFlags are train worker's flags.
type workerCmdFlags struct {
	r                runFlags
	clipPerLayer     *string
	csvf             csvFlags
	nf               natsFlags
	shard            *string
	exitOnDisconnect *bool
}

func (wf *workerCmdFlags) register(fs *flag.FlagSet) {
	wf.r.register(fs)
	wf.clipPerLayer = fs.String("clip-per-layer", "", "comma-separated clip bounds, one per layer with parameters (as given to the coordinator)")
	wf.csvf.register(fs)
	wf.nf.register(fs)
	wf.shard = fs.String("shard", "", "this worker's shard i/W (0 <= i < W): it holds the training examples [i*m/W, (i+1)*m/W)")
	wf.exitOnDisconnect = fs.Bool("exit-on-disconnect", false, "exit when the connection to NATS is lost (the workers train run -workers starts)")
	// A -config file shared with the coordinator may name its own flags.
	fs.Int("workers", 0, "the coordinator's (ignored here)")
	fs.String("save-model", "", "the coordinator's (ignored here)")
	fs.String("plot", "", "the coordinator's (ignored here)")
}

// trainConfig loads the data and builds the training configuration, as
// the coordinator does.
func (wf *workerCmdFlags) trainConfig(fs *flag.FlagSet) (train.Config, error) {
	r := &wf.r
	dirGiven := false
	fs.Visit(func(f *flag.Flag) { dirGiven = dirGiven || f.Name == "dir" })
	var (
		trainSet, testSet *data.Dataset
		table             *data.Tabular
		err               error
	)
	if r.dataset == "csv" {
		trainSet, testSet, table, _, err = wf.csvf.load(r.dir)
	} else {
		trainSet, testSet, _, err = loadData(r.dataset, r.dir, !dirGiven)
	}
	if err != nil {
		return train.Config{}, err
	}
	cfg, err := r.trainConfig(trainSet, testSet)
	if err != nil {
		return train.Config{}, err
	}
	if table != nil {
		cfg.Categorical = table.Cardinalities()
	}
	if cfg.ClipPerLayer, err = parseClipPerLayer(*wf.clipPerLayer); err != nil {
		return train.Config{}, err
	}
	return cfg, nil
}

// serve connects to NATS and serves the shard's clipped gradient sums
// until ctx ends (or, with -exit-on-disconnect, the connection is lost).
func (wf *workerCmdFlags) serve(ctx context.Context, cfg train.Config, shard distributed.Shard, stdout io.Writer) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var extra []nats.Option
	if *wf.exitOnDisconnect {
		extra = append(extra, nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { cancel() }))
	}
	nc, err := wf.nf.connect(fmt.Sprintf("dpmf train worker %s", shard), extra...)
	if err != nil {
		return err
	}
	defer nc.Close()
	opt := wf.nf.options(shard.Count)
	lo, hi := shard.Range(cfg.Train.Len())
	opt.OnReady = func() {
		fmt.Fprintf(stdout, "worker %s ready: training examples [%d, %d) of %d\n", shard, lo, hi, cfg.Train.Len())
	}
	err = distributed.Serve(wctx, nc, cfg, shard, opt)
	if err != nil && wctx.Err() != nil {
		if ctx.Err() != nil {
			return nil // SIGINT, SIGTERM: the coordinator retries or stops
		}
		return fmt.Errorf("worker %s: the connection to NATS was lost", shard)
	}
	return err
}

// parseClipPerLayer reads -clip-per-layer.
func parseClipPerLayer(s string) ([]float64, error) {
	if s == "" {
		return nil, nil
	}
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, usagef("-clip-per-layer %q: want positive numbers", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// urlHasUser reports whether every URL of a -nats list carries a user.
func urlHasUser(list string) bool {
	for _, u := range strings.Split(list, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.User == nil {
			return false
		}
	}
	return true
}
