package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/natstest"
)

// handoverConfig is the test configuration with the default lease (the
// time bounds below are about what a user gets without tuning).
func handoverConfig(t *testing.T) Config {
	cfg := testConfig(t)
	cfg.LeaseTTL = 0
	return cfg
}

// contribLoad contributes from workers goroutines through the front-end
// r (each contribution from a new contributor) until stopped, counting
// the answers and the longest wait for one.
type contribLoad struct {
	decided, logged, failed atomic.Int64
	mu                      sync.Mutex
	slowest                 time.Duration
	stop                    context.CancelFunc
	wg                      sync.WaitGroup
}

func startLoad(r *Node, workers int, prefix string) *contribLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &contribLoad{stop: cancel}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				start := time.Now()
				actx, acancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := r.Add(actx, fmt.Sprintf("%s-%d-%d", prefix, w, i), []float64{0.1, 0.2})
				acancel()
				d := time.Since(start)
				var le *LoggedError
				switch {
				case err == nil:
					l.decided.Add(1)
				case errors.As(err, &le):
					l.logged.Add(1)
				default:
					l.failed.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				l.mu.Lock()
				l.slowest = max(l.slowest, d)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *contribLoad) reset() {
	l.decided.Store(0)
	l.logged.Store(0)
	l.failed.Store(0)
	l.mu.Lock()
	l.slowest = 0
	l.mu.Unlock()
}

func (l *contribLoad) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d decided, %d logged, %d failed, slowest answer %v",
		l.decided.Load(), l.logged.Load(), l.failed.Load(), l.slowest.Round(time.Millisecond))
}

// waitLeader waits until some aggregator holds the lease and returns its id.
func waitLeader(t *testing.T, r *Node) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		e, err := r.lease.Get(lctx, "leader")
		cancel()
		if err == nil {
			return string(e.Value())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no aggregator took the lease")
	return ""
}

// waitWarm waits (up to 30 s) until the standby b has its engine restored
// at the last release, as a standby running for some time since the last
// release has; a second at least, for the load to fill the log.
func waitWarm(t *testing.T, fe *Node, b *aggProc) {
	t.Helper()
	time.Sleep(time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := fe.head(ctx)
		cancel()
		if err == nil && int64(h) == b.r.warmRelease.Load() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the standby did not restore its engine at the last release within 30 s")
}

// commitAfter commits through the front-end r and returns how long after
// from the commit's release was made (a commit logged before the new
// leader restored waits for it).
func commitAfter(t *testing.T, r *Node, from time.Time, what string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		_, err := r.Commit(ctx)
		if err == nil {
			return time.Since(from)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: no commit within 60 s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHolder waits (up to 60 s) until id holds the lease and returns how
// long after start.
func waitHolder(t *testing.T, fe *Node, id string, start time.Time) time.Duration {
	t.Helper()
	for time.Since(start) < 60*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		e, err := fe.lease.Get(ctx, "leader")
		cancel()
		if err == nil && string(e.Value()) == id {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not take the lease within 60 s", id)
	return 0
}

// TestReplicatedCrashTakeover: on a 3-node cluster under load, with the
// default lease, the leading aggregator is killed (its connection drops,
// its lease is not given up); a standby makes the next release within
// the bound, and contributions meanwhile are answered without waiting
// for the decision timeout: logged soon after the leader is gone.
func TestReplicatedCrashTakeover(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	cfg := handoverConfig(t)
	fe := dial(t, c.URLs(), cfg)
	a := startAggregator(t, c.URLs(), cfg)
	if id := waitLeader(t, fe); id != a.r.id {
		t.Fatalf("lease held by %s, want %s", id, a.r.id)
	}
	b := startAggregator(t, c.URLs(), cfg)
	t.Cleanup(b.kill)
	t.Cleanup(a.kill)
	load := startLoad(fe, 4, "crash")
	defer func() { load.stop(); load.wg.Wait() }()
	commitAfter(t, fe, time.Now(), "before the kill")
	// The leader is the holder of the lease when the standby is ready
	// (under heavy load a holder may lose it meanwhile: roles swap).
	leader, standby := a, b
	for range 5 {
		waitWarm(t, fe, standby)
		if holder := waitLeader(t, fe); holder == leader.r.id {
			break
		} else if holder == standby.r.id {
			leader, standby = standby, leader
		}
	}
	t.Logf("before the kill: %s", load)
	load.reset()
	start := time.Now()
	t.Logf("%s kill", start.Format("15:04:05.000"))
	leader.kill()
	won := waitHolder(t, fe, standby.r.id, start)
	answered := load.decided.Load() + load.logged.Load()
	took := commitAfter(t, fe, start, "after the kill")
	t.Logf("crash: lease taken %.2fs and next release %.2fs after the kill (lease TTL %v); %d answers before the lease was taken; in all %s",
		won.Seconds(), took.Seconds(), fe.cfg.LeaseTTL, answered, load)
	// The lease expires 1.6-2 s after the kill: a standby that tries it
	// every 0.1 s takes it by 2.1 s. (Before: 3.75-5 s, the 5 s lease.)
	if bound := 3500 * time.Millisecond; won > bound {
		t.Errorf("the standby took the lease %v after the kill, want at most %v", won.Round(time.Millisecond), bound)
	}
	if bound := 6 * time.Second; took > bound {
		t.Errorf("crash takeover (next release) took %v, want at most %v", took.Round(time.Millisecond), bound)
	}
	// Without a leader each contribution is answered as soon as it is
	// logged: at least 2 answers a second per client (waiting 2 s each
	// for a decision, as before, gives at most 0.5).
	if want := int64(2 * 4 * won.Seconds()); answered < want {
		t.Errorf("%d contributions answered in the %v without a leader, want at least %d", answered, won.Round(time.Millisecond), want)
	}
}

// TestReplicatedCleanHandover: a leading node stopped as dpserve stops on
// SIGTERM (its aggregator first, then its front-end, which has requests
// under load) hands the lease over at once, whatever the lease's TTL
// (120 s here: the standby polls every 6 s): a standby makes the next
// release within the bound.
func TestReplicatedCleanHandover(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	cfg := handoverConfig(t)
	cfg.LeaseTTL = 120 * time.Second
	fe := dial(t, c.URLs(), cfg)
	a := startAggregator(t, c.URLs(), cfg)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			a.kill()
		}
	})
	leader := waitLeader(t, fe)
	if leader != a.r.id {
		t.Fatalf("lease held by %s, want %s", leader, a.r.id)
	}
	b := startAggregator(t, c.URLs(), cfg)
	t.Cleanup(b.kill)
	// Load on the stopping node's front-end and on another.
	load := startLoad(fe, 2, "clean")
	defer func() { load.stop(); load.wg.Wait() }()
	own := startLoad(a.r, 2, "own")
	defer func() { own.stop(); own.wg.Wait() }()
	commitAfter(t, fe, time.Now(), "before the stop")
	waitWarm(t, fe, b)
	if holder := waitLeader(t, fe); holder != leader {
		t.Skipf("the stopping node lost its lease under this load before the stop (held by %s)", holder)
	}
	load.reset()
	start := time.Now()
	t.Logf("%s SIGTERM", start.Format("15:04:05.000"))
	stopDone := make(chan struct{})
	go func() {
		defer close(stopDone)
		a.cancel()
		<-a.done
		// The front-end finishes the requests it has, then stops.
		own.stop()
		own.wg.Wait()
		a.r.Close()
		a.nc.Close()
	}()
	stopped = true
	won := waitHolder(t, fe, b.r.id, start)
	took := commitAfter(t, fe, start, "after the stop")
	select {
	case <-stopDone:
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not stop")
	}
	t.Logf("clean stop: lease taken %.2fs and next release %.2fs after SIGTERM (lease TTL %v); meanwhile %s",
		won.Seconds(), took.Seconds(), cfg.LeaseTTL, load)
	// Before, the lease was given up after the HTTP server and the
	// engine had stopped, and the standby tried it every TTL/5 (24 s).
	if bound := time.Second; won > bound {
		t.Errorf("the standby took the lease %v after SIGTERM, want at most %v", won.Round(time.Millisecond), bound)
	}
	if bound := 5 * time.Second; took > bound {
		t.Errorf("clean handover (next release) took %v, want at most %v", took.Round(time.Millisecond), bound)
	}
}
