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
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	if !n.security().Authenticates(n.url) {
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

// security is the connection's credentials.
func (n *natsFlags) security() natsconn.Security {
	return natsconn.Security{TokenFile: n.tokenFile, Creds: n.creds, CA: n.ca, Cert: n.cert, Key: n.key}
}

func (n *natsFlags) options(workers int) distributed.Options {
	return distributed.Options{Run: n.run, Workers: workers, RequestTimeout: n.requestTimeout, Wait: n.wait}
}

func (n *natsFlags) connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond), nats.Timeout(5 * time.Second)}, extra...)
	sec, err := n.security().Options()
	if err != nil {
		return nil, usagef("-nats-token-file: %v", err)
	}
	opts = append(opts, sec...)
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		return nil, usagef("-nats %s: %v", natsconn.Redact(n.url), err)
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
	if w.workers < 0 || w.workers > cfg.Data.Train.Len() {
		return nil, usagef("-workers %d: want 0 (this process) to %d (the training examples)", w.workers, cfg.Data.Train.Len())
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
		fmt.Fprintf(log, "workers: %d (train worker -shard i/%d, run %q on %s)\n", w.workers, w.workers, w.nats.run, natsconn.Redact(w.nats.url))
		fmt.Fprintln(log, workersAssume)
		return distributed.Run(ctx, nc, cfg, w.options(stderr))
	}
	for _, f := range natsOnlyFlags[1:6] {
		if set[f] {
			return nil, usagef("-%s needs -nats (without it the workers run here on a loopback server with a fresh token)", f)
		}
	}
	return w.local(ctx, cfg, fs, log, stderr)
}

// options are the coordinator's options, saying on stderr what a step
// waits for.
func (w *workerFlags) options(stderr io.Writer) distributed.Options {
	opt := w.nats.options(w.workers)
	var mu sync.Mutex
	opt.OnWait = func(ww distributed.WorkerWait) {
		mu.Lock()
		defer mu.Unlock()
		if ww.Answered {
			fmt.Fprintf(stderr, "workers: worker %d/%d answered step %d after %s\n", ww.Worker, ww.Workers, ww.Step, ww.Waited.Round(100*time.Millisecond))
			return
		}
		fmt.Fprintf(stderr, "workers: step %d has waited %s for worker %d/%d: %s; the run stops with a checkpoint if it does not answer within %s more (-worker-wait)\n",
			ww.Step, ww.Waited.Round(time.Second), ww.Worker, ww.Workers, ww.Reason, ww.Left.Round(time.Second))
	}
	return opt
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
	procs := &localWorkers{log: stderr, restarts: maxWorkerRestarts}
	defer procs.stop()
	for i := range w.workers {
		name := fmt.Sprintf("%d/%d", i, w.workers)
		if err := procs.start(exe, name, append([]string{"worker", "-shard", name}, args...), stderr); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(log, "workers: %d local processes (pids %s) on %s\n", w.workers, procs.pids(), srv.ClientURL())
	fmt.Fprintln(log, workersAssume)
	if err := procs.ready(ctx, w.nats.wait+5*time.Minute); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(srv.ClientURL(), nats.Token(token), nats.Name("dpmf train coordinator"))
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	defer nc.Close()
	procs.supervise(ctx)
	res, err := distributed.Run(ctx, nc, cfg, w.options(stderr))
	procs.finish()
	if err == nil {
		procs.wait(10 * time.Second)
	}
	return res, err
}

// maxWorkerRestarts bounds how often train run -workers restarts each
// worker process it started that exited during the run.
const maxWorkerRestarts = 3

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// localWorkers are the worker processes of train run -workers. Once the
// run has started (supervise), a worker that exits is started again, with
// a line on log, up to restarts times each: a worker's answer is a pure
// function of the request, so the coordinator, which keeps asking for
// -worker-wait, carries on with the new process.
type localWorkers struct {
	log      io.Writer
	restarts int // per worker

	mu       sync.Mutex
	procs    []*workerProc
	readyc   chan error
	watching bool            // supervise was called: exits are restarted
	finished bool            // the run is over: exits are expected
	run      context.Context // the run's (when done, so are the workers)
}

// workerProc is one worker: its command line, its current process, and
// how often it was restarted.
type workerProc struct {
	name      string // i/W
	exe       string
	args      []string
	stderr    io.Writer
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd has exited and its output is read
	restarted int
}

// start starts worker name (i/W) with exe args.
func (p *localWorkers) start(exe, name string, args []string, stderr io.Writer) error {
	if p.readyc == nil {
		p.readyc = make(chan error, 1024)
	}
	w := &workerProc{name: name, exe: exe, args: args, stderr: stderr}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.launch(w, p.readyc); err != nil {
		return err
	}
	p.procs = append(p.procs, w)
	return nil
}

// launch starts w's process, with p.mu held; readiness (or an exit before
// it) goes to ready.
func (p *localWorkers) launch(w *workerProc, ready chan<- error) error {
	c := exec.Command(w.exe, w.args...)
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
	w.cmd, w.exited = c, done
	var lines sync.WaitGroup
	lines.Add(2)
	go func() {
		defer lines.Done()
		sc := bufio.NewScanner(errp)
		for sc.Scan() {
			fmt.Fprintln(w.stderr, sc.Text())
		}
	}()
	go func() {
		defer lines.Done()
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && strings.HasPrefix(sc.Text(), "worker ") && strings.Contains(sc.Text(), " ready") {
				ok = true
				ready <- nil
			}
		}
		if !ok {
			ready <- errors.New("workers: a worker process exited before it was ready (its error is above)")
		}
	}()
	go func() {
		lines.Wait()
		c.Wait()
		close(done)
		p.exited(w, c)
	}()
	return nil
}

// exited restarts w, whose process c ended, when the run goes on and w
// has restarts left, saying so in one line either way.
func (p *localWorkers) exited(w *workerProc, c *exec.Cmd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.watching || p.finished || w.cmd != c || p.run.Err() != nil {
		// Not running yet, over, or interrupted (SIGINT reaches the
		// workers too): an exit is expected.
		return
	}
	how := c.ProcessState.String() // "signal: killed", "exit status 1"
	if w.restarted >= p.restarts {
		fmt.Fprintf(p.log, "workers: worker %s (pid %d) %s; not restarted (restarted %d times already)\n", w.name, c.Process.Pid, how, w.restarted)
		return
	}
	w.restarted++
	// Readiness of a restarted worker is not awaited: the coordinator
	// keeps asking it for -worker-wait, and says so.
	if err := p.launch(w, make(chan error, 2)); err != nil {
		fmt.Fprintf(p.log, "workers: worker %s (pid %d) %s; restarting it failed: %v\n", w.name, c.Process.Pid, how, err)
		return
	}
	fmt.Fprintf(p.log, "workers: worker %s (pid %d) %s; restarted as pid %d (restart %d of at most %d)\n", w.name, c.Process.Pid, how, w.cmd.Process.Pid, w.restarted, p.restarts)
}

// pids lists the workers' current process ids.
func (p *localWorkers) pids() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, w := range p.procs {
		ids = append(ids, strconv.Itoa(w.cmd.Process.Pid))
	}
	return strings.Join(ids, ", ")
}

// supervise starts restarting workers that exit while ctx, the run's, is
// not done.
func (p *localWorkers) supervise(ctx context.Context) {
	p.mu.Lock()
	p.watching, p.run = true, ctx
	p.mu.Unlock()
}

// finish stops restarting: the run is over, its workers exit.
func (p *localWorkers) finish() {
	p.mu.Lock()
	p.finished = true
	p.mu.Unlock()
}

// ready waits until every worker listens.
func (p *localWorkers) ready(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for range p.procs {
		select {
		case err := <-p.readyc:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("train: %w before the first step (while starting the workers; nothing to save): %w", train.ErrInterrupted, ctx.Err())
		case <-t.C:
			return fmt.Errorf("workers: not all %d workers were ready within %v", len(p.procs), timeout)
		}
	}
	return nil
}

// wait gives the workers, told that the run is over, time to exit.
func (p *localWorkers) wait(timeout time.Duration) {
	deadline := time.After(timeout)
	for _, d := range p.exitChans() {
		select {
		case <-d:
		case <-deadline:
			return
		}
	}
}

func (p *localWorkers) exitChans() []chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	var cs []chan struct{}
	for _, w := range p.procs {
		cs = append(cs, w.exited)
	}
	return cs
}

// stop kills the workers still running and reaps them.
func (p *localWorkers) stop() {
	p.mu.Lock()
	p.finished = true
	procs := slices.Clone(p.procs)
	p.mu.Unlock()
	for _, w := range procs {
		p.mu.Lock()
		c, done := w.cmd, w.exited
		p.mu.Unlock()
		select {
		case <-done:
		default:
			c.Process.Kill()
			<-done
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
		cfg.Model.Categorical = table.Cardinalities()
	}
	if cfg.Model.ClipPerLayer, err = parseClipPerLayer(*wf.clipPerLayer); err != nil {
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
	lo, hi := shard.Range(cfg.Data.Train.Len())
	opt.OnReady = func() {
		fmt.Fprintf(stdout, "worker %s ready: training examples [%d, %d) of %d\n", shard, lo, hi, cfg.Data.Train.Len())
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
