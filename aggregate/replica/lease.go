package replica

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errDeposed: another aggregator wrote the release this one was about to
// write, or took the lease.
var errDeposed = errors.New("deposed: another aggregator holds the lease or wrote the release")

// RunAggregator stands for the aggregator's lease until ctx ends, and
// leads while it holds it: it applies the log to the engine in order,
// makes the releases and stores them. Standing by, it keeps an engine
// ready at the last release and tries to take the lease whenever the
// holder gives it up (it watches the key) and otherwise every
// LeaseTTL/20, so it takes over within that of the lease's expiry after a
// crash. When ctx ends it gives the lease up as soon as the log is no
// longer applied, so that a standby leads at once, and returns.
func (r *Node) RunAggregator(ctx context.Context) {
	freed := r.watchLease(ctx)
	var ws *warmStandby
	defer func() {
		if ws != nil {
			ws.take().close()
		}
	}()
	for ctx.Err() == nil {
		start := time.Now()
		rev, err := r.lease.Create(ctx, "leader", []byte(r.id))
		if err != nil {
			if ws == nil {
				// Standing by: keep an engine ready.
				ws = r.startWarm(ctx)
			}
			select {
			case <-ctx.Done():
			case <-freed:
			case <-time.After(r.cfg.LeaseTTL / 20):
			}
			continue
		}
		r.logf("aggregator %s: lease won", r.id)
		var warm *warmEngine
		if ws != nil {
			warm = ws.take()
			ws = nil
		}
		lctx, cancel := context.WithCancel(ctx)
		var held atomic.Uint64 // the lease's revision this holder last wrote
		held.Store(rev)
		go r.renew(lctx, cancel, &held, start)
		// Give the lease up so that a standby (or this process) leads
		// without waiting for it to expire; on a clean stop (ctx
		// ended) as soon as the log is no longer applied, before the
		// engine is closed. A crash gives nothing up: the lease expires.
		release := sync.OnceFunc(func() {
			cancel()
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.LeaseTTL)
			r.releaseLease(dctx, held.Load())
			dcancel()
		})
		err = r.lead(lctx, warm, func() {
			if ctx.Err() != nil {
				release()
			}
		})
		cancel()
		if ctx.Err() == nil {
			r.logf("aggregator %s: stopped leading: %v", r.id, err)
		}
		release()
		if ctx.Err() == nil {
			time.Sleep(r.cfg.LeaseTTL / 10)
		}
	}
}

// watchLease returns a channel that receives when the lease key is
// deleted (a holder gave it up); without a watch (an error), nothing is
// sent and the standby polls.
func (r *Node) watchLease(ctx context.Context) <-chan struct{} {
	freed := make(chan struct{}, 1)
	w, err := r.lease.Watch(ctx, "leader", jetstream.UpdatesOnly())
	if err != nil {
		return freed
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil && e.Operation() != jetstream.KeyValuePut {
					select {
					case freed <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	return freed
}

// renew keeps the lease (won by a request sent at since); when an Update
// with the expected revision fails (another holder, or the cluster
// unreachable for long) leading stops.
//
// The lease expires leaseTTL after the server stored the last update,
// which is after the update was sent: leading stops at the first renewal
// attempt more than leaseTTL/2 after the last successful update was sent,
// so by about 3/4 leaseTTL after that (renewals every leaseTTL/5, each
// given up after leaseTTL/4), before the lease can expire. Safety does
// not rest on this: a release is stored only by creating its key (see
// checkpoint), and a leader that finds the key taken stops.
func (r *Node) renew(ctx context.Context, stop context.CancelFunc, held *atomic.Uint64, since time.Time) {
	defer stop()
	rev := held.Load()
	tick := time.NewTicker(r.cfg.LeaseTTL / 5)
	defer tick.Stop()
	last := since
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Now()
		uctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseTTL/4)
		nrev, err := r.lease.Update(uctx, "leader", []byte(r.id), rev)
		cancel()
		switch {
		case err == nil:
			rev, last = nrev, sent
			held.Store(rev)
		case errors.Is(err, jetstream.ErrKeyExists) || time.Since(last) > r.cfg.LeaseTTL/2:
			// Someone else holds it, or it may have expired: a standby
			// may lead now.
			r.logf("aggregator %s: lease not renewed: %v", r.id, err)
			return
		}
	}
}

// releaseLease gives the lease up (a clean shutdown), so a standby takes
// over at once: deleted if its revision is still rev, the one this
// holder last wrote (or, when a renewal's reply was lost, the one read).
func (r *Node) releaseLease(ctx context.Context, rev uint64) {
	if r.lease.Delete(ctx, "leader", jetstream.LastRevision(rev)) == nil {
		return
	}
	e, err := r.lease.Get(ctx, "leader")
	if err == nil && string(e.Value()) == r.id {
		r.lease.Delete(ctx, "leader", jetstream.LastRevision(e.Revision()))
	}
}
