package main

// The results file of train sweep: append-only JSON lines, one a record.
// Each record reaches the file in one write and is fsynced before the next
// run starts, so a kill leaves at most the last line torn; reopening
// truncates a torn or unreadable last line and keeps every line before it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dpmf-go/dpmf/privacy"
	"io"
	"io/fs"
	"os"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/train"
)

// sweepCell is one point of the grid: a mechanism and a sampling at a
// target epsilon, the Seed-th run of it; Draw > 0 is the Draw-th run of
// a private selection at that epsilon (mechanism and sampling drawn).
type sweepCell struct {
	Mechanism string           `json:"mechanism"`
	Sampling  privacy.Sampling `json:"sampling"` // SamplingAuto: the mechanism's
	Epsilon   float64          `json:"epsilon"`
	Seed      int              `json:"seed"`
	Draw      int              `json:"draw,omitempty"`
}

func (c sweepCell) key() string {
	return fmt.Sprintf("%s|%s|%g|%d|%d", c.Mechanism, c.Sampling, c.Epsilon, c.Seed, c.Draw)
}

// samplingLabel is the cell's sampling, "default" when the mechanism's.
func (c sweepCell) samplingLabel() string {
	if c.Sampling == privacy.SamplingAuto {
		return "default"
	}
	return string(c.Sampling)
}

// sweepRecord is one line of the results file. Kind "sweep" heads the
// file with the recipe; "selection" fixes a private selection's draws
// before its first run; "run" is a finished run (Result) or one that
// failed (Error).
type sweepRecord struct {
	Kind string `json:"kind"`
	// kind sweep
	Recipe map[string]string `json:"recipe,omitempty"`
	// kind run
	Cell    *sweepCell    `json:"cell,omitempty"`
	Result  *train.Result `json:"result,omitempty"`
	Error   string        `json:"error,omitempty"`
	Seconds float64       `json:"seconds,omitempty"`
	// NoisyCount is a selection run's count of correctly classified
	// validation examples plus discrete Gaussian noise (what the selection
	// compares), Score that count over the validation examples; InsecureSeed marks a run whose
	// seed derives from a sweep -seed of fewer than 128 bits.
	Score        *float64 `json:"score,omitempty"`
	NoisyCount   *int64   `json:"noisy_count,omitempty"`
	InsecureSeed bool     `json:"insecure_seed,omitempty"`
	// kind selection
	Selection *selectionDraws `json:"selection,omitempty"`
}

// selectionDraws is a private selection at one target epsilon, drawn
// before its first run: the number of runs K and each run's candidate,
// with every candidate's accounting event (the selection's claim bounds
// the worst of them).
type selectionDraws struct {
	Epsilon     float64                  `json:"epsilon"`
	Repetitions accountant.Repetitions   `json:"repetitions"`
	K           int                      `json:"k"`
	Candidates  []sweepCell              `json:"candidates"`
	Events      []json.RawMessage        `json:"candidate_events"`
	Delta       float64                  `json:"delta"`
	ScoreNoise  float64                  `json:"score_noise"`
	Validation  int                      `json:"validation_examples"`
	Draws       []int                    `json:"draws"` // index into Candidates, one per run
	Ledgers     []accountant.LedgerEntry `json:"-"`
}

// errLocked: another process holds the results file.
var errLocked = errors.New("locked by another process")

// sweepLog is the open results file and what it holds. It is locked
// while open: two sweeps appending to one file would overwrite each
// other's records.
type sweepLog struct {
	path    string
	f       *os.File
	records []sweepRecord
	dropped int // torn or unreadable lines removed at open
}

// openSweepLog opens (creating) the results file at path, reads its
// records and truncates a torn or unreadable tail. A line that does not
// parse followed by lines that do is corruption, not a kill: refused.
func openSweepLog(path string) (*sweepLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, usagef("sweep: results %s: %v", path, err)
		}
		return nil, fmt.Errorf("sweep: results %s: %w", path, err)
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, usagef("sweep: %s is in use by another train sweep (one sweep per -out at a time)", path)
		}
		return nil, fmt.Errorf("sweep: results %s: %w", path, err)
	}
	l := &sweepLog{path: path, f: f}
	all, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("sweep: results %s: %w", path, err)
	}
	var keep int64
	rest := all
	for line := 1; len(rest) > 0; line++ {
		nl := bytes.IndexByte(rest, '\n')
		var rec sweepRecord
		if nl < 0 || json.Unmarshal(rest[:nl], &rec) != nil || rec.Kind == "" {
			if nl >= 0 && bytes.Count(rest[nl+1:], []byte{'\n'}) > 0 {
				f.Close()
				return nil, usagef("sweep: results %s line %d is not a sweep record and lines follow it: the file is corrupt (move it away to start afresh)", path, line)
			}
			l.dropped = 1
			break
		}
		l.records = append(l.records, rec)
		keep += int64(nl) + 1
		rest = rest[nl+1:]
	}
	if err := f.Truncate(keep); err != nil {
		f.Close()
		return nil, fmt.Errorf("sweep: results %s: %w", path, err)
	}
	if _, err := f.Seek(keep, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("sweep: results %s: %w", path, err)
	}
	return l, nil
}

// append writes rec as one line in one write and makes it durable.
func (l *sweepLog) append(rec sweepRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("sweep: results: %w", err)
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("sweep: results %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sweep: results %s: %w", l.path, err)
	}
	l.records = append(l.records, rec)
	return nil
}

func (l *sweepLog) close() error { return l.f.Close() }

// runs are the run records by cell key.
func (l *sweepLog) runs() map[string]sweepRecord {
	m := map[string]sweepRecord{}
	for _, r := range l.records {
		if r.Kind == "run" && r.Cell != nil {
			m[r.Cell.key()] = r
		}
	}
	return m
}
