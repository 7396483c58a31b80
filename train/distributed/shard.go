package distributed

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/train"
)

// Shard is worker Index of Count: it holds the training examples
// [Index*m/Count, (Index+1)*m/Count) of a data set of m examples.
type Shard struct {
	Index, Count int
}

// ParseShard reads "i/W" (0 <= i < W).
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	w, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || w < 1 || i < 0 || i >= w {
		return Shard{}, dpcore.Invalid("distributed", "shard %q: want i/W with 0 <= i < W", s)
	}
	return Shard{i, w}, nil
}

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Range is the shard's examples [lo, hi) of m.
func (s Shard) Range(m int) (lo, hi int) {
	return int(int64(s.Index) * int64(m) / int64(s.Count)), int(int64(s.Index+1) * int64(m) / int64(s.Count))
}

// Options are the settings coordinator and workers share.
type Options struct {
	// Run names the run: its subjects are dpmf.train.<Run>.shard.<i> and
	// dpmf.train.<Run>.done. Letters, digits, '-' and '_'.
	Run string
	// Workers is W, the number of shards.
	Workers int
	// RequestTimeout is how long the coordinator waits for a word from
	// a worker working on a request (a computing worker sends a heartbeat
	// four times a second) before asking again: a worker killed in the
	// middle of a step is noticed within it (0: 10 s; at least 1 s).
	RequestTimeout time.Duration
	// Wait bounds how long one step keeps asking a worker that does not
	// answer (lost, restarting) before the run stops (0: 60 s).
	Wait time.Duration
	// OnReady, when set, is called by Serve once the worker listens.
	OnReady func()
	// OnWait, when set, is called by Run while a step waits for a worker
	// that does not answer: at the first failed request, then at most
	// every WaitReportEvery, and once more when the worker answers. It is
	// called from one goroutine per worker, possibly concurrently.
	OnWait func(WorkerWait)
}

// WaitReportEvery spaces the OnWait calls about one worker.
const WaitReportEvery = 5 * time.Second

// WorkerWait is what a step waits for (Options.OnWait).
type WorkerWait struct {
	// Worker i of Workers has not answered Step for Waited; the run
	// stops after Left more (Options.Wait).
	Worker, Workers, Step int
	Waited, Left          time.Duration
	// Reason is why the last request failed (no worker listens, no word
	// for RequestTimeout, ...).
	Reason string
	// Answered is set in the last call: the worker answered after Waited.
	Answered bool
}

func (o *Options) defaults() {
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.Wait == 0 {
		o.Wait = 60 * time.Second
	}
}

func (o Options) validate() error {
	if len(o.Run) < 1 || len(o.Run) > 64 {
		return dpcore.Invalid("distributed", "run name %q: want 1 to 64 letters, digits, '-' or '_'", o.Run)
	}
	for _, c := range o.Run {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return dpcore.Invalid("distributed", "run name %q: want letters, digits, '-' or '_'", o.Run)
		}
	}
	if o.Workers < 1 || o.Workers > maxWorkers {
		return dpcore.Invalid("distributed", "%d workers: want 1 to %d", o.Workers, maxWorkers)
	}
	if o.RequestTimeout < time.Second || o.Wait < 0 {
		return dpcore.Invalid("distributed", "request timeout %v (want at least 1 s) or wait %v (want positive)", o.RequestTimeout, o.Wait)
	}
	return nil
}

const maxWorkers = 1024

func (o Options) subject(i int) string { return "dpmf.train." + o.Run + ".shard." + strconv.Itoa(i) }
func (o Options) doneSubject() string  { return "dpmf.train." + o.Run + ".done" }

// checkConfig refuses what the workers cannot compute exactly as one
// process would.
// Check refuses, before any worker is started, a configuration Run would
// refuse before its first step for what it is: what the trainer refuses
// (train.Config.Check) and what training across workers does not support.
// Run checks the same.
func Check(cfg train.Config, workers int) error {
	if err := checkConfig(&cfg); err != nil {
		return err
	}
	if workers > cfg.Data.Train.Len() {
		return dpcore.Invalid("distributed", "%d workers for %d examples: a worker needs at least one", workers, cfg.Data.Train.Len())
	}
	return cfg.Check()
}

func checkConfig(cfg *train.Config) error {
	switch {
	case cfg.Data.Train == nil || cfg.Data.Train.Len() == 0:
		return dpcore.Invalid("distributed", "no training data")
	case cfg.Privacy.UserBound != nil:
		return dpcore.Invalid("distributed", "user-level runs are not supported across workers (a user's examples would have to live on one worker)")
	case cfg.Data.Augment != nil && cfg.Data.Augment.Multiplicity > 1:
		return dpcore.Invalid("distributed", "augmentation multiplicity is not supported across workers (the copies' gradients are averaged before clipping, which the workers do not do)")
	case cfg.Data.Augment != nil:
		return dpcore.Invalid("distributed", "augmentation is not supported across workers (its randomness is the trainer's)")
	case cfg.Privacy.Quantile != nil:
		return dpcore.Invalid("distributed", "adaptive clipping is not supported across workers (the workers clip with a fixed norm)")
	case cfg.Model.Backend != nil:
		return dpcore.Invalid("distributed", "Config.Model.Backend is set: the workers build the model from the named model settings")
	}
	return nil
}

// shardDigest identifies what a worker must compute with: the model and
// clipping settings, the data set's size, and the shard's examples and
// labels (before any feature transform; data.Dataset.HashExamples, as the
// training data a checkpoint records). A worker refuses requests whose
// digest is not its own, so a worker started with other data or flags
// never contributes.
func shardDigest(cfg *train.Config, model models.Model, s Shard) [32]byte {
	h := sha256.New()
	m := cfg.Data.Train.Len()
	lo, hi := s.Range(m)
	fmt.Fprintf(h, "dpmf distributed v1\nmodel=%s layout=%v input=%v classes=%d features=%s params=%d\n",
		model.Name(), model.Layout(), model.InputShape(), model.Classes(), cfg.Data.Features, model.NumParams())
	fmt.Fprintf(h, "clip=%g perlayer=%v nonprivate=%v batch=%d examples=%d shape=%v classes=%d shard=%s range=%d-%d\n",
		cfg.Privacy.ClipNorm, cfg.Model.ClipPerLayer, cfg.NonPrivate, cfg.Privacy.Batch, m, cfg.Data.Train.Shape, cfg.Data.Train.Classes, s, lo, hi)
	cfg.Data.Train.HashExamples(h, lo, hi)
	var out [32]byte
	h.Sum(out[:0])
	return out
}
