package replica

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/nats-io/nats.go/jetstream"
)

// warmEngine is an engine restored at the state after a release, in its
// own directory.
type warmEngine struct {
	agg      *aggregate.Aggregator
	dir      string
	released int
	seq      uint64 // the log position applied
	atCommit bool   // the log holds a commit right after seq
}

func (w *warmEngine) close() {
	if w != nil {
		w.agg.Close()
		os.RemoveAll(w.dir)
	}
}

// restoreWarm restores the engine at the last release in a new directory.
func (r *Node) restoreWarm(ctx context.Context) (*warmEngine, error) {
	dir, err := os.MkdirTemp(r.cfg.WorkDir, "dpserve-aggregator-")
	if err != nil {
		return nil, err
	}
	agg, released, seq, err := r.restore(ctx, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &warmEngine{agg: agg, dir: dir, released: released, seq: seq}, nil
}

// warmStandby is the engine a standby keeps restored at the last release
// and applied to the log's contributions after it, so that it leads
// without restoring (decoding the mechanism and calibrating the noise)
// or replaying the log.
type warmStandby struct {
	stop context.CancelFunc
	done chan *warmEngine // keepWarm's engine once it ended
}

func (r *Node) startWarm(ctx context.Context) *warmStandby {
	wctx, cancel := context.WithCancel(ctx)
	ws := &warmStandby{stop: cancel, done: make(chan *warmEngine, 1)}
	go func() { ws.done <- r.keepWarm(wctx) }()
	return ws
}

// take stops keeping the engine warm and returns it (nil if none).
func (ws *warmStandby) take() *warmEngine {
	ws.stop()
	return <-ws.done
}

// keepWarm checks every second whether the last release changed and
// then restores the engine again, at most every warmEvery (a restore
// costs a fraction of a second of CPU); in between it applies the log's
// contributions after the release to the engine, as the leader does,
// without publishing its decisions, up to the first commit (only a
// leader commits). It returns the engine when ctx ends.
func (r *Node) keepWarm(ctx context.Context) *warmEngine {
	var (
		e    *warmEngine
		last time.Time
		tail struct {
			it   jetstream.MessagesContext
			msgs <-chan logMsg
			stop context.CancelFunc
		}
	)
	stopTail := func() {
		if tail.it != nil {
			tail.stop()
			tail.it.Stop()
			tail.it, tail.msgs = nil, nil
		}
	}
	defer r.warmRelease.Store(-1)
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		t, err := r.head(ctx)
		if ctx.Err() != nil {
			stopTail()
			return e
		}
		if err == nil && (e == nil || e.released != t) && time.Since(last) >= warmEvery {
			stopTail()
			last = time.Now()
			if ne, err := r.restoreWarm(ctx); err == nil {
				e.close()
				e = ne
				r.warmRelease.Store(int64(e.released))
			}
		}
		if e != nil && !e.atCommit && tail.it == nil {
			var rctx context.Context
			rctx, tail.stop = context.WithCancel(ctx)
			if tail.it, tail.msgs, err = r.readLog(rctx, e.seq); err != nil {
				tail.stop()
				tail.it, tail.msgs = nil, nil
			}
		}
	apply:
		for {
			select {
			case <-ctx.Done():
				break apply
			case <-check.C:
				break apply
			case n := <-tail.msgs:
				switch {
				case n.err != nil:
					stopTail()
					break apply
				case n.m.Subject() == r.subjCmt:
					e.atCommit = true
					stopTail()
					break apply
				}
				// Not cancelled with ctx: an entry is applied whole.
				if _, err := r.apply(context.WithoutCancel(ctx), e.agg, n.m, &e.seq, nil); err != nil {
					stopTail()
					e.close()
					e = nil
					r.warmRelease.Store(-1)
					break apply
				}
			}
		}
	}
}

// warmEvery: a standby restores its engine at most this often.
const warmEvery = 5 * time.Second

// storedMechanism is the mechanism the snapshots hold, decoded from the
// store at path the first time and remembered: every snapshot descends
// from the store release 1 was made with (a release is stored only by
// creating its key), and the mechanism is written once, when a store is
// made. Decoding it took most of a restore's time; Open still checks
// the store's fingerprint of the configuration. nil when the store holds
// none.
func (r *Node) storedMechanism(path string) (*aggregate.StrategyMechanism, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mech == nil {
		m, err := aggregate.StoredMechanism(path, r.cfg.Aggregate.Mechanism.Schema())
		if err != nil {
			return nil, err
		}
		r.mech = m
	}
	return r.mech, nil
}

// openEngine opens the aggregator on the cache file path, a snapshot of
// release t (none for t = 0), with the mechanism stored in it.
func (r *Node) openEngine(ctx context.Context, path string, t int) (*aggregate.Aggregator, error) {
	cfg := r.cfg.Aggregate
	if t > 0 {
		mech, err := r.storedMechanism(path)
		if err != nil {
			return nil, err
		}
		if mech != nil {
			built := cfg.Mechanism
			switch {
			case mech.Name() != built.Name():
				return nil, fmt.Errorf("%w: mechanism %s, but the snapshot was made with %s", aggregate.ErrStoreMismatch, built.Name(), mech.Name())
			case mech.Workload().String() != built.Workload().String():
				return nil, fmt.Errorf("%w: workload %s, but the snapshot was made for %s", aggregate.ErrStoreMismatch, built.Workload(), mech.Workload())
			}
			cfg.Mechanism = mech
		}
	}
	return aggregate.Open(ctx, path, cfg)
}

// restore opens the engine at the state of the last release.
func (r *Node) restore(ctx context.Context, dir string) (*aggregate.Aggregator, int, uint64, error) {
	t, err := r.head(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	path := filepath.Join(dir, "aggregator.db")
	var seq uint64
	if t > 0 {
		rec, _, err := r.record(ctx, t)
		if err != nil {
			return nil, 0, 0, err
		}
		data, err := r.snapshot(ctx, rec)
		if err != nil {
			return nil, 0, 0, err
		}
		if err := gunzipFile(path, data); err != nil {
			return nil, 0, 0, fmt.Errorf("snapshot %s: %w", rec.Snapshot, err)
		}
		seq = rec.Seq
	}
	agg, err := r.openEngine(ctx, path, t)
	if err != nil {
		return nil, 0, 0, err
	}
	if got := agg.Ledger().Steps; got != t {
		agg.Close()
		return nil, 0, 0, fmt.Errorf("snapshot of release %d holds %d releases", t, got)
	}
	return agg, t, seq, nil
}

// snapshot reads the snapshot rec names and checks its checksum. The
// object store's reads may be answered by a replica that is catching up
// and does not hold it yet (it was stored before the record was
// created), so a failed read is retried for up to 10 s.
func (r *Node) snapshot(ctx context.Context, rec *releaseRecord) ([]byte, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := r.snaps.GetBytes(ctx, rec.Snapshot)
		if err == nil {
			if h := sha256.Sum256(data); hex.EncodeToString(h[:]) == rec.SnapSHA {
				return data, nil
			}
			err = errors.New("checksum mismatch")
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("snapshot %s: %w", rec.Snapshot, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func gunzipFile(path string, data []byte) error {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, zr); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
