package distributed

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/train"
	"github.com/nats-io/nats.go"
)

// ErrWorkerLost is wrapped by the error Run returns when a worker did not
// answer a step within Options.Wait: the step was rolled back and the run
// stopped (with a checkpoint at the last complete step, when the run has
// a checkpoint path).
var ErrWorkerLost = errors.New("worker lost")

// ErrWorkerRefused is wrapped when a worker refused a step: it was
// started with other data or settings, or its computation failed.
var ErrWorkerRefused = errors.New("worker refused the step")

var errShard = dpcore.Invalid("distributed", "a shard needs 0 <= i < W <= examples")

// coordinator sends a step's indices and parameters to the workers and
// collects their sums.
type coordinator struct {
	nc  *nats.Conn
	opt Options
	m   int // training examples
	// bound is the clip norm (0 for a non-private run): a worker's sum of
	// n clipped gradients has norm at most n times it.
	bound   float64
	digests [][32]byte
	stop    context.CancelCauseFunc
	parts   []partial
	errs    []error
	asked   time.Time
}

// Run trains cfg with the clipped sums computed by opt.Workers workers
// (Serve, each started with the same data and settings) reachable on nc,
// which must be authenticated. It is train.Run otherwise: the same plan,
// noise, checkpoints, metrics and result. A worker that stays away
// longer than opt.Wait stops the run between steps (ErrWorkerLost, with
// train.ErrInterrupted); running it again resumes from the checkpoint.
// When the run is over the workers are told to exit.
func Run(ctx context.Context, nc *nats.Conn, cfg train.Config, opt Options) (*train.Result, error) {
	opt.defaults()
	if err := opt.validate(); err != nil {
		return nil, err
	}
	cfg.Defaults()
	if err := checkConfig(&cfg); err != nil {
		return nil, err
	}
	if opt.Workers > cfg.Data.Train.Len() {
		return nil, dpcore.Invalid("distributed", "%d workers for %d examples: a worker needs at least one", opt.Workers, cfg.Data.Train.Len())
	}
	m, err := train.NewModel(cfg)
	if err != nil {
		return nil, err
	}
	c := &coordinator{nc: nc, opt: opt, m: cfg.Data.Train.Len(), parts: make([]partial, opt.Workers), errs: make([]error, opt.Workers)}
	if !cfg.NonPrivate {
		c.bound = cfg.Privacy.ClipNorm
	}
	for i := range opt.Workers {
		c.digests = append(c.digests, shardDigest(&cfg, m, Shard{i, opt.Workers}))
	}
	// Every request must fit the server's max_payload: refuse before the
	// plan is built rather than at the first step.
	if need := 64 + 4*m.NumParams() + 4*(cfg.Data.Train.Len()/opt.Workers+cfg.Privacy.Batch); int64(need) > nc.MaxPayload() {
		return nil, dpcore.Invalid("distributed", "a step's request to a worker needs up to about %d bytes (%d parameters), above the NATS server's max_payload of %d bytes: raise max_payload", need, m.NumParams(), nc.MaxPayload())
	}
	cfg.Model.Built, cfg.Model.Backend = nil, backend{m, c}
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	c.stop = stop
	res, err := train.Run(rctx, cfg)
	if cause := context.Cause(rctx); err != nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		if errors.Is(cause, ErrWorkerLost) {
			// An interruption: the same run started again resumes.
			return res, fmt.Errorf("distributed: %w; %w", cause, err)
		}
		// A refusal is not an interruption to resume from: it is said
		// with what the trainer saved, and keeps its own kind.
		return res, fmt.Errorf("%w (%v)", cause, err)
	}
	if err == nil {
		nc.Publish(opt.doneSubject(), nil)
		nc.FlushTimeout(5 * time.Second)
	}
	return res, err
}

// backend is the model on the coordinator: its parameters, evaluation,
// checkpoints; the clipped sums come from the workers.
type backend struct {
	models.Model
	c *coordinator
}

func (b backend) NewEngine(opt clip.Options) (train.Engine, error) {
	local, err := clip.New(b.Model, opt)
	if err != nil {
		return nil, err
	}
	return &engine{local, b.c}, nil
}

// engine is the coordinator's IndexEngine. It wraps the local engine's
// parameters and evaluation only: it offers no other capability of
// clip.Engine (per-user sums, a clip norm that changes during the run),
// so the trainer refuses what the workers would not compute the same way.
type engine struct {
	local *clip.Engine
	c     *coordinator
}

func (e *engine) Params() []float32 { return e.local.Params() }

func (e *engine) EvaluateContext(ctx context.Context, x []float32, y []int) (loss, acc float64, err error) {
	return e.local.EvaluateContext(ctx, x, y)
}

var _ train.IndexEngine = (*engine)(nil)

// ClippedSumContext is never called for an IndexEngine: the coordinator
// holds no examples to clip.
func (e *engine) ClippedSumContext(context.Context, []float32, []int, []float32) (clip.Stats, error) {
	return clip.Stats{}, errors.New("distributed: the coordinator computes no gradients; the workers do")
}

func (e *engine) ClippedSumIndices(ctx context.Context, step int, idx []int, dst []float32) (clip.Stats, error) {
	return e.c.step(ctx, step, idx, e.Params(), dst)
}

// step asks every worker for its part of the batch idx at params and
// adds the parts in shard order into dst. Any failure cancels the run
// (the trainer then rolls the step back and checkpoints).
func (c *coordinator) step(ctx context.Context, step int, idx []int, params, dst []float32) (clip.Stats, error) {
	var wg sync.WaitGroup
	c.asked = time.Now()
	for i := range c.opt.Workers {
		lo, hi := Shard{i, c.opt.Workers}.Range(c.m)
		a, b := sort.SearchInts(idx, lo), sort.SearchInts(idx, hi)
		var nb [8]byte
		rand.Read(nb[:])
		req := encodeRequest(&request{digest: c.digests[i], step: step, nonce: binary.LittleEndian.Uint64(nb[:]), ids: idx[a:b], params: params})
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.errs[i] = c.ask(ctx, i, step, binary.LittleEndian.Uint64(nb[:]), b-a, len(params), req)
		}()
	}
	wg.Wait()
	if err := errors.Join(c.errs...); err != nil {
		if ctx.Err() != nil {
			return clip.Stats{}, ctx.Err()
		}
		c.stop(err)
		return clip.Stats{}, ctx.Err()
	}
	// All W parts are in for this step and these parameters: only now is
	// anything written.
	for i := range dst {
		dst[i] = 0
	}
	var tl clip.Tally
	for i := range c.parts {
		p := &c.parts[i]
		for j, v := range p.sum {
			dst[j] += v
		}
		tl.Merge(clip.Tally{Examples: p.examples, Units: p.examples, LossSum: p.lossSum, ClippedSum: p.clippedSum, NonFinite: p.nonFinite, NormQuantiles: p.quantiles})
	}
	return tl.Stats(), nil
}

// ask sends worker i its request until it answers or opt.Wait passes. A
// worker's answer is a pure function of the request, so asking again is
// safe; only a reply with this request's nonce and step is taken.
func (c *coordinator) ask(ctx context.Context, i, step int, nonce uint64, n, d int, req []byte) error {
	subj := c.opt.subject(i)
	deadline := c.asked.Add(c.opt.Wait)
	var (
		last     error
		reported time.Time // the last OnWait call (zero: none yet)
	)
	// report tells OnWait, at most every WaitReportEvery, why the step
	// still waits for worker i.
	report := func(reason string) {
		now := time.Now()
		if c.opt.OnWait != nil && now.Sub(reported) >= WaitReportEvery {
			reported = now
			c.opt.OnWait(WorkerWait{Worker: i, Workers: c.opt.Workers, Step: step, Waited: now.Sub(c.asked), Left: max(deadline.Sub(now), 0), Reason: reason})
		}
	}
	for {
		reply, err := c.exchange(ctx, subj, req, nonce, report)
		if err == nil && !reported.IsZero() {
			c.opt.OnWait(WorkerWait{Worker: i, Workers: c.opt.Workers, Step: step, Waited: time.Since(c.asked), Answered: true})
		}
		if err == nil {
			p := &c.parts[i]
			if err := decodeReply(reply, p); err != nil {
				return fmt.Errorf("%w: worker %d/%d: step %d: %v", ErrWorkerRefused, i, c.opt.Workers, step, err)
			}
			switch {
			case p.nonce != nonce || p.step != step:
				last = fmt.Errorf("a reply for another request")
			case p.refusal != "" && p.mismatch:
				return dpcore.Invalid("distributed", "%w: step %d: %s", ErrWorkerRefused, step, p.refusal)
			case p.refusal != "":
				return fmt.Errorf("%w: step %d: %s", ErrWorkerRefused, step, p.refusal)
			case p.examples != n || len(p.sum) != d:
				return fmt.Errorf("%w: worker %d/%d: step %d: a sum of %d examples and %d coordinates, want %d and %d", ErrWorkerRefused, i, c.opt.Workers, step, p.examples, len(p.sum), n, d)
			case c.bound > 0 && !(norm(p.sum) <= float64(n)*c.bound*(1+normSlack)+normSlack):
				// The noise is calibrated to one example moving the sum by
				// at most the clip norm: a sum no set of n clipped
				// gradients can make is refused, never noised and applied.
				return fmt.Errorf("%w: worker %d/%d: step %d: the sum of %d clipped gradients has norm %.6g, above %d x clip norm %g", ErrWorkerRefused, i, c.opt.Workers, step, n, norm(p.sum), n, c.bound)
			default:
				return nil
			}
		} else {
			last = err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(last, nats.ErrNoResponders) {
			last = fmt.Errorf("no worker listens on %s: is worker %d/%d running, with run name %q?", subj, i, c.opt.Workers, c.opt.Run)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: worker %d/%d did not answer step %d within %v (%v)", ErrWorkerLost, i, c.opt.Workers, step, c.opt.Wait, last)
		}
		report(last.Error())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryEvery):
		}
	}
}

// exchange sends req to subj and returns the reply. A worker sends a
// heartbeat every heartbeatEvery while it computes, so a request is given
// up after opt.RequestTimeout of silence: a worker killed in the middle
// of a step is noticed within that time, however long a step takes.
// Silence of WaitReportEvery or more is told to report meanwhile.
func (c *coordinator) exchange(ctx context.Context, subj string, req []byte, nonce uint64, report func(string)) ([]byte, error) {
	inbox := c.nc.NewRespInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := c.nc.PublishMsg(&nats.Msg{Subject: subj, Reply: inbox, Data: req}); err != nil {
		return nil, err
	}
	word := time.Now() // the last answer or heartbeat
	for {
		silence := time.Since(word)
		wctx, cancel := context.WithTimeout(ctx, min(c.opt.RequestTimeout-silence, max(WaitReportEvery-silence, time.Second)))
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			if silence = time.Since(word); silence < c.opt.RequestTimeout {
				if silence >= WaitReportEvery {
					report(fmt.Sprintf("no answer and no heartbeat for %v (asked again at %v, -worker-timeout)", silence.Round(time.Second), c.opt.RequestTimeout))
				}
				continue
			}
			return nil, fmt.Errorf("neither an answer nor a heartbeat for %v", c.opt.RequestTimeout)
		case err != nil:
			return nil, err
		case len(msg.Data) == 0 && msg.Header.Get("Status") == "503":
			return nil, nats.ErrNoResponders
		case isHeartbeat(msg.Data, nonce):
			word = time.Now()
			continue
		}
		return msg.Data, nil
	}
}

// retryEvery spaces the requests to a worker that does not answer.
const retryEvery = 100 * time.Millisecond

// normSlack absorbs float32 rounding in the workers' clipping and sums.
const normSlack = 1e-3

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}
