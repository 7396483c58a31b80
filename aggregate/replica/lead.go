package replica

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// lead applies the log in order while ctx lasts, starting from warm (an
// engine a standby restored ahead) if it is at the last release, and
// otherwise from the stored state. stopped (if not nil) is called once
// the log is no longer applied, before the engine is closed.
func (r *Node) lead(ctx context.Context, warm *warmEngine, stopped func()) error {
	how := "engine kept ready while standing by"
	if warm != nil {
		if t, err := r.head(ctx); err != nil || t != warm.released {
			warm.close()
			warm = nil
		}
	}
	if warm == nil {
		how = "restored"
		w, err := r.restoreWarm(ctx)
		if err != nil {
			return err
		}
		warm = w
	}
	defer warm.close()
	agg, released, seq := warm.agg, warm.released, warm.seq
	r.logf("aggregator %s: continuing after release %d at log position %d (%s)", r.id, released, seq, how)
	// Releases are stored in order by one goroutine while the log is
	// applied on; the first failure stops leading.
	ctx, cancelLead := context.WithCancelCause(ctx)
	defer cancelLead(nil)
	pipe := &pipeline{jobs: make(chan *checkpointJob, 2)}
	stored := r.storeReleases(ctx, cancelLead, pipe)
	defer func() { <-stored }()
	defer close(pipe.jobs)
	it, msgs, err := r.readLog(ctx, seq)
	if err != nil {
		return err
	}
	defer it.Stop()
	err = r.applyLog(ctx, agg, seq, pipe, msgs)
	if stopped != nil {
		stopped()
	}
	return err
}

// storeReleases stores the releases sent on pipe.jobs in order and
// publishes each decision once its release is stored; the first failure
// cancels leading (later jobs are skipped). The channel returned is closed
// when pipe.jobs is closed and drained.
func (r *Node) storeReleases(ctx context.Context, cancelLead context.CancelCauseFunc, pipe *pipeline) <-chan struct{} {
	stored := make(chan struct{})
	go func() {
		defer close(stored)
		for j := range pipe.jobs {
			if ctx.Err() != nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := r.store(cctx, j)
			cancel()
			if err != nil {
				cancelLead(err)
				continue
			}
			pipe.pending.Add(-1)
			r.publish([]decision{j.dec})
		}
	}()
	return stored
}

// logMsg is the next message of the log, or the error that ends reading.
type logMsg struct {
	m   jetstream.Msg
	err error
}

// readLog reads the log from position seq+1 on into the channel returned,
// until an error (sent too) or the end of ctx; the caller stops it.
func (r *Node) readLog(ctx context.Context, seq uint64) (jetstream.MessagesContext, <-chan logMsg, error) {
	cons, err := r.js.OrderedConsumer(ctx, r.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.cfg.Service + ".log.>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: seq + 1,
	})
	if err != nil {
		return nil, nil, err
	}
	// Short heartbeats: a consumer whose server died is noticed (and the
	// ordered consumer recreated from the next position) within seconds.
	it, err := cons.Messages(jetstream.PullMaxMessages(1024), jetstream.PullExpiry(5*time.Second), jetstream.PullHeartbeat(time.Second))
	if err != nil {
		return nil, nil, err
	}
	msgs := make(chan logMsg, 64)
	go func() {
		// Next without a timeout: its heartbeat check runs only while
		// it waits long enough.
		for {
			m, err := it.Next()
			select {
			case msgs <- logMsg{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return it, msgs, nil
}

// applyLog applies the log's messages to agg while ctx lasts, writing the
// ledger and publishing commit ticks as they fall due.
func (r *Node) applyLog(ctx context.Context, agg *aggregate.Aggregator, seq uint64, pipe *pipeline, msgs <-chan logMsg) error {
	tick := time.NewTicker(aliveEvery)
	defer tick.Stop()
	lastLedger := time.Time{}
	ledgerDirty := false
	nextTick := time.Now().Add(r.cfg.CommitEvery)
	for ctx.Err() == nil {
		var n logMsg
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
			// The heartbeat: the front-ends wait for decisions while
			// they hear it.
			r.publish([]decision{})
		case n = <-msgs:
		}
		switch {
		case n.err != nil:
			return n.err
		case n.m != nil:
			d, err := r.apply(ctx, agg, n.m, &seq, pipe)
			if err != nil {
				return err
			}
			if d != nil {
				r.publish([]decision{*d})
			}
			// A commit's decision is published once its release is
			// stored (d is nil), but the ledger changed all the same.
			ledgerDirty = true
		}
		// The ledger is written when every release made is stored: it
		// never counts a release that cannot be read yet.
		if ledgerDirty && time.Since(lastLedger) > 250*time.Millisecond && pipe.pending.Load() == 0 {
			if err := r.writeLedger(ctx, agg.Ledger()); err != nil {
				return err
			}
			lastLedger, ledgerDirty = time.Now(), false
		}
		if r.cfg.CommitEvery > 0 && time.Now().After(nextTick) {
			r.publishTick(ctx, agg)
			nextTick = time.Now().Add(r.cfg.CommitEvery)
		}
	}
	return context.Cause(ctx)
}

// publishTick asks the log for a commit of the next step. The same id for
// the same step: two aggregators' ticks for one step are de-duplicated by
// the log.
func (r *Node) publishTick(ctx context.Context, agg *aggregate.Aggregator) {
	next := agg.Ledger().Steps + 1
	if next <= r.cfg.horizon() {
		r.js.PublishMsg(ctx, nats.NewMsg(r.subjCmt), jetstream.WithMsgID("tick:"+strconv.Itoa(next)))
	}
}

// apply applies one log entry and returns the decision to publish (nil
// for an entry already applied).
//
// With async set, a release's snapshot is taken at once but stored by the
// receiver of async, which publishes the commit's decision after storing
// it; apply then returns a nil decision for the commit. Decisions on later
// contributions do not depend on the noise, so they may be published
// before the release is stored: an aggregator that replays the log from
// the stored state decides the same.
func (r *Node) apply(ctx context.Context, agg *aggregate.Aggregator, m jetstream.Msg, seq *uint64, async *pipeline) (*decision, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	if md.Sequence.Stream <= *seq {
		return nil, nil // delivered again after a consumer reset
	}
	*seq = md.Sequence.Stream
	d := &decision{ID: m.Headers().Get(jetstream.MsgIDHeader), Seq: md.Sequence.Stream}
	switch m.Subject() {
	case r.subjAdd:
		c, vec, derr := decodeEntry(m.Data())
		if derr != nil {
			c, vec = "", nil // rejected by Add below, in log order
		}
		step, err := agg.Add(ctx, c, vec)
		d.Step = step
		var rej *aggregate.RejectError
		switch {
		case errors.As(err, &rej):
			d.Step, d.Detail = rej.Step, rej.Detail
			d.Reason = reasonIndex(rej.Reason)
		case err != nil:
			return nil, err
		}
	case r.subjCmt:
		rel, err := agg.Commit(ctx)
		switch {
		case errors.Is(err, aggregate.ErrBudgetExhausted):
			d.Reason, d.Detail = reasonIndex(aggregate.ErrBudgetExhausted), err.Error()
		case err != nil:
			return nil, err
		default:
			d.Step = rel.Step
			if async != nil {
				j, err := r.prepare(agg, rel, *seq)
				if err != nil {
					return nil, err
				}
				j.dec = *d
				async.pending.Add(1)
				select {
				case async.jobs <- j:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return nil, nil
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := r.checkpoint(cctx, agg, rel, *seq)
			cancel()
			if err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

func (r *Node) publish(decs []decision) {
	b, _ := json.Marshal(decs)
	r.nc.Publish(r.subjDec, b) // best effort: a front-end that misses it answers logged
}

// checkpoint stores release rel with the snapshot after it and the log
// position seq it covers. Creating rel.<t> is the single point of
// decision: if the key exists another aggregator made release t first.
func (r *Node) checkpoint(ctx context.Context, agg *aggregate.Aggregator, rel *aggregate.Release, seq uint64) error {
	j, err := r.prepare(agg, rel, seq)
	if err != nil {
		return err
	}
	return r.store(ctx, j)
}

// pipeline carries releases from the log's applier to the goroutine that
// stores them in order.
type pipeline struct {
	jobs    chan *checkpointJob
	pending atomic.Int64 // releases made and not stored yet
}

// checkpointJob is a release with the snapshot taken right after it, to
// store.
type checkpointJob struct {
	rel  *aggregate.Release
	snap []byte
	rec  releaseRecord
	dec  decision
}

// prepare takes the snapshot after release rel (synchronously: the engine
// moves on afterwards).
func (r *Node) prepare(agg *aggregate.Aggregator, rel *aggregate.Release, seq uint64) (*checkpointJob, error) {
	// The store file holds the mechanism's factorization (dense, and
	// mostly structure) and free pages: gzip at its fastest makes it a
	// fraction of its size.
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := agg.Snapshot(zw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	h := sha256.Sum256(buf.Bytes())
	// One name per attempt: a record whose write landed unseen may name
	// an earlier attempt's snapshot, which a retry must neither
	// overwrite nor delete.
	var nonce [6]byte
	rand.Read(nonce[:])
	name := fmt.Sprintf("snap.%d.%s.%x", rel.Step, r.id, nonce)
	return &checkpointJob{rel: rel, snap: buf.Bytes(), rec: releaseRecord{Step: rel.Step, Seq: seq, Sum: rel.Sum,
		HasCount: rel.HasCount, Count: rel.Count, Snapshot: name, SnapSHA: hex.EncodeToString(h[:]), Ledger: agg.Ledger(), Leader: r.id}}, nil
}

// store writes the snapshot, then creates the release record.
func (r *Node) store(ctx context.Context, j *checkpointJob) error {
	rel, name := j.rel, j.rec.Snapshot
	if _, err := r.snaps.PutBytes(ctx, name, j.snap); err != nil {
		return fmt.Errorf("snapshot %s: %w", name, err)
	}
	b, err := json.Marshal(j.rec)
	if err != nil {
		return err
	}
	if _, err := r.state.Create(ctx, relKey(rel.Step), b); err != nil {
		if err := r.createFailed(ctx, rel.Step, name, err); err != nil {
			return err
		}
	}
	// The head only moves forward (expected revision); a reader also
	// probes past it, so a head left behind is harmless.
	r.advanceHead(ctx, rel.Step)
	// Snapshots older than the previous release are no longer needed.
	if old := rel.Step - 2; old >= 1 {
		if orec, _, err := r.record(ctx, old); err == nil {
			r.snaps.Delete(ctx, orec.Snapshot)
		}
	}
	return nil
}

// createFailed settles a failed Create of release t's record, which
// named the snapshot name: nil when the record stored names it (the
// write landed and only its reply was lost), errDeposed when it names
// another (the snapshot, never referenced, is deleted), and otherwise the
// error, keeping the snapshot: the write may still land, and a record
// must never name a deleted snapshot (every later leader would fail to
// restore from it).
func (r *Node) createFailed(ctx context.Context, t int, name string, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rec, _, rerr := r.record(rctx, t)
	switch {
	case rerr == nil && rec.Snapshot == name:
		return nil
	case rerr == nil || errors.Is(err, jetstream.ErrKeyExists):
		r.snaps.Delete(rctx, name)
		return fmt.Errorf("release %d: %w", t, errDeposed)
	default:
		// Unknown whether it was written: start again from the stored
		// state.
		return fmt.Errorf("release %d: %w", t, err)
	}
}

func (r *Node) advanceHead(ctx context.Context, t int) {
	v := []byte(strconv.Itoa(t))
	for range 5 {
		e, err := r.stateGet(ctx, "head")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			_, err = r.state.Create(ctx, "head", v)
		} else if err == nil {
			if h, _ := strconv.Atoi(string(e.value)); h >= t {
				return
			}
			_, err = r.state.Update(ctx, "head", v, e.rev)
		}
		if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
			return
		}
	}
}

// writeLedger stores the ledger unless a stored one has more steps
// (compare and update with the expected revision).
func (r *Node) writeLedger(ctx context.Context, l aggregate.Ledger) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	for range 5 {
		e, err := r.stateGet(ctx, "ledger")
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			_, err = r.state.Create(ctx, "ledger", b)
		case err == nil:
			var old aggregate.Ledger
			if json.Unmarshal(e.value, &old) == nil && old.Steps > l.Steps {
				return nil
			}
			_, err = r.state.Update(ctx, "ledger", b, e.rev)
		}
		if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
			return nil // best effort: the next batch writes it again
		}
	}
	return nil
}
