package distributed

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/train"
	"github.com/nats-io/nats.go"
)

// worker computes its shard's clipped gradient sums.
type worker struct {
	nc     *nats.Conn
	shard  Shard
	lo, hi int
	digest [32]byte
	data   *data.Dataset // the shard's examples, features applied
	engine *clip.Engine
	batch  int // the trainer's chunk (the engine's MaxBatch)
	local  []int
	x      []float32
	y      []int
	chunk  []float32
	req    request
	out    partial
}

// Serve runs worker shard of the run cfg describes until ctx is done or
// the coordinator says the run is over. cfg holds the whole training set
// (as the coordinator's does, from the same flags); the worker keeps only
// its shard. nc must be an authenticated connection.
func Serve(ctx context.Context, nc *nats.Conn, cfg train.Config, shard Shard, opt Options) error {
	opt.defaults()
	opt.Workers = shard.Count
	if err := opt.validate(); err != nil {
		return err
	}
	w, err := newWorker(ctx, cfg, shard)
	if err != nil {
		return err
	}
	w.nc = nc
	done := make(chan struct{})
	dsub, err := nc.Subscribe(opt.doneSubject(), func(*nats.Msg) {
		select {
		case <-done:
		default:
			close(done)
		}
	})
	if err != nil {
		return fmt.Errorf("distributed: worker %s: %w", shard, err)
	}
	defer dsub.Unsubscribe()
	// A queue group: a replacement started while the old worker still
	// runs shares the requests instead of answering them twice.
	sub, err := nc.QueueSubscribe(opt.subject(shard.Index), "shard", w.handle)
	if err != nil {
		return fmt.Errorf("distributed: worker %s: %w", shard, err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("distributed: worker %s: %w", shard, err)
	}
	if opt.OnReady != nil {
		opt.OnReady()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return nil
	}
}

func newWorker(ctx context.Context, cfg train.Config, shard Shard) (*worker, error) {
	cfg.Defaults()
	if err := checkConfig(&cfg); err != nil {
		return nil, err
	}
	if shard.Count < 1 || shard.Index < 0 || shard.Index >= shard.Count || shard.Count > cfg.Data.Train.Len() {
		return nil, fmt.Errorf("distributed: shard %s of %d examples: %w", shard, cfg.Data.Train.Len(), errShard)
	}
	m, err := workerModel(cfg)
	if err != nil {
		return nil, err
	}
	w := &worker{shard: shard, batch: cfg.Privacy.Batch}
	w.lo, w.hi = shard.Range(cfg.Data.Train.Len())
	w.digest = shardDigest(&cfg, m, shard)
	idx := make([]int, w.hi-w.lo)
	for i := range idx {
		idx[i] = w.lo + i
	}
	if w.data, err = cfg.Data.Train.Subset(idx); err != nil {
		return nil, err
	}
	if w.data, err = train.ApplyFeatures(ctx, cfg.Data.Features, w.data); err != nil {
		return nil, err
	}
	w.engine, err = clip.New(m, clip.Options{Norm: cfg.Privacy.ClipNorm, PerLayer: cfg.Model.ClipPerLayer, NonPrivate: cfg.NonPrivate, MaxBatch: cfg.Privacy.Batch})
	if err != nil {
		return nil, fmt.Errorf("distributed: worker %s: %w", shard, err)
	}
	// As train.New does: nothing in the shard may make a step fail later.
	if err := w.engine.CheckInputs(w.data.X); err != nil {
		return nil, fmt.Errorf("distributed: worker %s: training data: %w", shard, err)
	}
	w.x = make([]float32, cfg.Privacy.Batch*w.data.Shape.Size())
	w.y = make([]int, cfg.Privacy.Batch)
	w.chunk = make([]float32, m.NumParams())
	w.out.sum = make([]float32, m.NumParams())
	return w, nil
}

func (w *worker) handle(m *nats.Msg) {
	// Heartbeats while computing tell the coordinator this worker is
	// alive, so that it can give up on a dead one quickly.
	stop := make(chan struct{})
	var beats sync.WaitGroup
	if nonce, ok := requestNonce(m.Data); ok && m.Reply != "" {
		beats.Add(1)
		go func() {
			defer beats.Done()
			t := time.NewTicker(heartbeatEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					w.nc.Publish(m.Reply, encodeHeartbeat(nonce))
				}
			}
		}()
	}
	p := w.compute(m.Data)
	close(stop)
	beats.Wait()
	m.Respond(encodeReply(p))
}

// heartbeatEvery spaces a computing worker's heartbeats; the coordinator
// waits Options.RequestTimeout (at least a second) for one.
const heartbeatEvery = 250 * time.Millisecond

// compute is the worker's part of sampleAndClip: the same chunks, the
// same order of additions, so that one worker's sum is the trainer's bit
// for bit.
func (w *worker) compute(msg []byte) *partial {
	p := &w.out
	*p = partial{sum: p.sum[:cap(p.sum)]}
	refuse := func(format string, args ...any) *partial {
		p.refusal = fmt.Sprintf("worker %s: ", w.shard) + fmt.Sprintf(format, args...)
		return p
	}
	if err := decodeRequest(msg, &w.req); err != nil {
		return refuse("%v", err)
	}
	r := &w.req
	p.nonce, p.step = r.nonce, r.step
	if r.digest != w.digest {
		p.mismatch = true
		return refuse("the coordinator's run differs from this worker's (model, clipping, batch or the shard's data): start both with the same data and flags")
	}
	params := w.engine.Params()
	if len(r.params) != len(params) {
		return refuse("%d parameters sent, the model has %d", len(r.params), len(params))
	}
	w.local = w.local[:0]
	for _, id := range r.ids {
		if id < w.lo || id >= w.hi {
			return refuse("example %d is not in this shard [%d, %d)", id, w.lo, w.hi)
		}
		w.local = append(w.local, id-w.lo)
	}
	copy(params, r.params)
	for i := range p.sum {
		p.sum[i] = 0
	}
	ctx := context.Background()
	var tl clip.Tally
	for lo := 0; lo < len(w.local); lo += w.batch {
		hi := min(lo+w.batch, len(w.local))
		n := hi - lo
		x, y := w.x[:n*w.data.Shape.Size()], w.y[:n]
		if err := w.data.Batch(w.local[lo:hi], x, y); err != nil {
			return refuse("%v", err)
		}
		st, err := w.engine.ClippedSumContext(ctx, x, y, w.chunk)
		if err != nil {
			return refuse("step %d: %v", r.step, err)
		}
		for i, v := range w.chunk {
			p.sum[i] += v
		}
		tl.Add(st, n, n)
	}
	p.examples = len(w.local)
	p.lossSum, p.clippedSum, p.nonFinite, p.quantiles = tl.LossSum, tl.ClippedSum, tl.NonFinite, tl.NormQuantiles
	return p
}

// workerModel is the worker's own model: built from cfg, or a copy of
// cfg.Model, which is the caller's handle (the coordinator's, in one
// process) and must not be written by the worker.
func workerModel(cfg train.Config) (models.Model, error) {
	if cfg.Model.Built == nil {
		return train.NewModel(cfg)
	}
	var b bytes.Buffer
	if err := models.Save(&b, cfg.Model.Built, models.Metadata{}); err != nil {
		return nil, fmt.Errorf("distributed: copying the model: %w", err)
	}
	tr, err := models.Load(&b)
	if err != nil {
		return nil, fmt.Errorf("distributed: copying the model: %w", err)
	}
	return tr.Model, nil
}
