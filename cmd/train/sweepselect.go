package main

// Private selection in train sweep (-select): at each target epsilon, K
// runs (K drawn once, from a law of mean -select), each of a (mechanism,
// sampling) drawn uniformly from the grid, each scored by its validation
// accuracy with discrete Gaussian noise; the best score wins and the selection
// carries one (epsilon, delta), accounted as dp_accounting accounts a
// RepeatAndSelectDpEvent (accountant.SelectionEpsilon; docs/math.md §8).

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/sampler"
	"github.com/dpmf-go/dpmf/train"
)

// selectFlags are the flags of private selection.
type selectFlags struct {
	mean       float64
	law        string
	scoreNoise float64
}

func (f *selectFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&f.mean, "select", 0, "tune privately with this mean number of runs K (at least 1) at each -epsilons: each run's (mechanism, sampling) is drawn from the grid, the best noisy validation score wins, and the selection carries one (epsilon, delta) (Papernot & Steinke 2022; needs -validation; omitted: a plain grid)")
	fs.StringVar(&f.law, "select-law", "geometric", "law of the number of runs K of -select: geometric, logarithmic, poisson (K may be 0), or a truncated negative binomial shape >= 0")
	fs.Float64Var(&f.scoreNoise, "select-noise", 10, "-select: standard deviation of the discrete Gaussian noise added to the count of correctly classified validation examples (the score's sensitivity is 1)")
}

// repetitions is the law of K.
func (f *selectFlags) repetitions() (accountant.Repetitions, error) {
	r := accountant.Repetitions{Mean: f.mean}
	switch f.law {
	case "geometric":
		r.Shape = 1
	case "logarithmic":
		r.Shape = 0
	case "poisson":
		r.Shape = math.Inf(1)
	default:
		v, err := strconv.ParseFloat(f.law, 64)
		if err != nil || !(v >= 0) {
			return r, usagef("sweep: -select-law %q: want geometric, logarithmic, poisson or a shape >= 0", f.law)
		}
		r.Shape = v
	}
	if err := r.Check(); err != nil {
		return r, usagef("sweep: -select %g: %v", f.mean, dpcore.Within("accountant", err))
	}
	return r, nil
}

// noAllocationRDP says why -select refuses random allocation: the
// selection's guarantee composes the candidates' Rényi bounds
// (accountant.SelectionRDP), and random allocation is accounted only by
// its privacy loss distribution. Feldman and Shenfeld (2025) bound its
// Rényi divergence; that bound is not implemented here.
const noAllocationRDP = "the selection composes the candidates' Renyi (RDP) bounds, and random allocation is accounted only by its privacy loss distribution (no Renyi bound for it is implemented); name other samplings with -samplings (poisson, band-poisson, fixed-order or shuffle)"

func (f *selectFlags) check(r runFlags, seedsGiven bool) error {
	if r.validation <= 0 {
		return usagef("sweep: -select needs -validation N: the selection scores runs on examples held out of training, never on the test split")
	}
	if seedsGiven {
		return usagef("sweep: -select draws its runs; -seeds is for a plain grid")
	}
	if r.users.level || r.users.users > 0 {
		return usagef("sweep: -select is for example-level runs (a user's examples may fall on both sides of -validation)")
	}
	if !(f.scoreNoise > 0) || math.IsInf(f.scoreNoise, 0) {
		return usagef("sweep: -select-noise %v: want a positive finite standard deviation", f.scoreNoise)
	}
	_, err := f.repetitions()
	return err
}

// selectionRNG is a ChaCha8 generator for the selection's draws: seeded
// from the sweep's -seed and label, or from crypto/rand.
func (s *sweep) selectionRNG(label string) (*rand.ChaCha8, error) {
	var seed [32]byte
	if s.r.seed != "" {
		seed = *dpcore.DeriveSeed([]byte(s.r.seed), label)
	} else if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	return rand.NewChaCha8(seed), nil
}

// candidates are the grid's (mechanism, sampling) pairs at eps.
func (s *sweep) candidates(eps float64) []sweepCell {
	var cs []sweepCell
	for _, m := range s.grid.mechanisms {
		for _, samp := range s.grid.samplings {
			cs = append(cs, sweepCell{Mechanism: m, Sampling: samp, Epsilon: eps})
		}
	}
	return cs
}

// drawSelection plans every candidate at eps (their events bound the
// selection's cost), draws K and each run's candidate, and records them
// before any run, so that a resumed sweep runs the same selection.
func (s *sweep) drawSelection(ctx context.Context, eps float64) (*selectionDraws, error) {
	reps, err := s.sel.repetitions()
	if err != nil {
		return nil, err
	}
	d := &selectionDraws{Epsilon: eps, Repetitions: reps, Candidates: s.candidates(eps), ScoreNoise: s.sel.scoreNoise, Validation: s.r.validation}
	for _, c := range d.Candidates {
		cfg, err := s.cellConfig(c)
		if err != nil {
			return nil, err
		}
		t, err := train.New(ctx, cfg)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("sweep: %w while planning the selection's candidates (nothing run yet): %w", train.ErrInterrupted, ctx.Err())
		}
		if err != nil {
			return nil, fmt.Errorf("sweep: -select: candidate %s, %s at epsilon %g: %w", c.Mechanism, c.samplingLabel(), eps, err)
		}
		p := t.Plan()
		t.Close()
		if p == nil {
			return nil, usagef("sweep: -select: candidate %s is not private", c.Mechanism)
		}
		if d.Delta == 0 {
			d.Delta = p.Delta
		} else if p.Delta != d.Delta {
			return nil, usagef("sweep: -select: the candidates' deltas differ (%g, %g)", d.Delta, p.Delta)
		}
		if p.Accounting.Kind == sampler.AccountingRandomAllocation {
			return nil, usagef("sweep: -select: candidate %s chose %s sampling by default: %s", c.Mechanism, p.Sampling, noAllocationRDP)
		}
		d.Events = append(d.Events, p.Ledger.Event)
	}
	// Refuse, before any run, candidates the selection cannot account.
	if _, err := d.claimEpsilon(); err != nil {
		return nil, err
	}
	src, err := s.selectionRNG(fmt.Sprintf("sweep-select/%g", eps))
	if err != nil {
		return nil, err
	}
	rng := rand.New(src)
	if d.K, err = reps.Draw(rng.Float64); err != nil {
		return nil, err
	}
	for range d.K {
		d.Draws = append(d.Draws, rng.IntN(len(d.Candidates)))
	}
	if err := s.log.append(sweepRecord{Kind: "selection", Selection: d}); err != nil {
		return nil, err
	}
	return d, nil
}

// recordedSelection is the selection at eps recorded in the results file
// (nil: none yet); one over other candidates or another law is refused.
func (s *sweep) recordedSelection(eps float64) (*selectionDraws, error) {
	for _, r := range s.log.records {
		d := r.Selection
		if r.Kind != "selection" || d == nil || d.Epsilon != eps {
			continue
		}
		reps, err := s.sel.repetitions()
		if err != nil {
			return nil, err
		}
		same := d.Repetitions == reps && d.ScoreNoise == s.sel.scoreNoise && d.Validation == s.r.validation &&
			len(d.Candidates) == len(s.candidates(eps)) && len(d.Events) == len(d.Candidates) && len(d.Draws) == d.K
		for i, c := range s.candidates(eps) {
			same = same && i < len(d.Candidates) && d.Candidates[i].key() == c.key()
		}
		if !same {
			return nil, usagef("sweep: %s holds a selection at epsilon %g with other candidates or settings; use another -out", s.log.path, eps)
		}
		return d, nil
	}
	return nil, nil
}

// selectionResult is one selection's outcome: what train sweep releases.
type selectionResult struct {
	Epsilon     float64                `json:"target_epsilon"`
	Repetitions accountant.Repetitions `json:"repetitions"`
	K           int                    `json:"runs"`
	Candidates  []sweepCell            `json:"candidates"`
	// Selected is the best run's cell (nil when K = 0), Mechanism the
	// mechanism its plan built, Score its noisy validation accuracy.
	Selected  *sweepCell `json:"selected,omitempty"`
	Mechanism string     `json:"mechanism,omitempty"`
	// ModelFile is the selected run's model, with the selection's claim
	// (train eval -model-file gives its test accuracy).
	ModelFile string  `json:"model_file,omitempty"`
	Score     float64 `json:"score"`
	count     int64
	// Claim is the selection's guarantee: it covers Selected, Mechanism,
	// Score and the selected run's model, not the other runs.
	Claim selectionClaim `json:"claim"`
}

type selectionClaim struct {
	Epsilon     float64              `json:"epsilon"`
	Delta       float64              `json:"delta"`
	Accountant  string               `json:"accountant"`
	Adjacency   accountant.Adjacency `json:"adjacency"`
	Rule        string               `json:"rule"`
	Assumptions []string             `json:"assumptions"`
}

// runSelections runs the selection at every target epsilon.
func (s *sweep) runSelections(ctx context.Context) error {
	var (
		results []selectionResult
		draws   []*selectionDraws
	)
	for _, eps := range s.grid.epsilons {
		d, err := s.recordedSelection(eps)
		if err != nil {
			return err
		}
		if d == nil {
			fmt.Fprintf(s.stderr, "sweep: -select at epsilon %g: planning the %d candidates\n", eps, len(s.candidates(eps)))
			if d, err = s.drawSelection(ctx, eps); err != nil {
				return err
			}
		}
		fmt.Fprintf(s.stdout, "sweep: selection at epsilon %g: %d runs drawn (K ~ %s) over %d candidates\n", eps, d.K, d.Repetitions, len(d.Candidates))
		have := s.log.runs()
		var todo []int
		for k := 1; k <= d.K; k++ {
			if _, ok := have[d.cell(k).key()]; !ok {
				todo = append(todo, k)
			}
		}
		for i, k := range todo {
			c := d.cell(k)
			what := fmt.Sprintf("selection at epsilon %g, run %d of %d", eps, k, d.K)
			fmt.Fprintf(s.stderr, "sweep: %s: %s\n", what, c.describe())
			rec, err := s.runCell(ctx, c)
			if err != nil {
				return err
			}
			if rec.Error == "" && rec.Result != nil {
				if err := s.score(&rec, d, k); err != nil {
					return err
				}
			}
			if err := s.log.append(rec); err != nil {
				return err
			}
			s.removeCheckpoint(c)
			s.progress(rec, len(todo)-i-1, what)
		}
		res, err := s.selectBest(d)
		if err != nil {
			return err
		}
		if err := s.releaseModel(&res, d); err != nil {
			return err
		}
		results = append(results, res)
		draws = append(draws, d)
	}
	out := selectionOutput{Selections: results}
	if err := combine(draws, &out); err != nil {
		return err
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(s.dir, "selection.json")
	if err := atomicfile.WriteFile(path, append(b, '\n')); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	for _, r := range results {
		if r.Selected == nil {
			fmt.Fprintf(s.stdout, "selection at epsilon %g: no run drawn (K = 0), nothing selected; privacy (epsilon %.4g, delta %.3g)\n", r.Epsilon, r.Claim.Epsilon, r.Claim.Delta)
			continue
		}
		fmt.Fprintf(s.stdout, "selection at epsilon %g: %s, %s (plan: %s), noisy validation accuracy %.4f, model %s; privacy of the selection (epsilon %.4g, delta %.3g), %s\n",
			r.Epsilon, r.Selected.Mechanism, r.Selected.samplingLabel(), r.Mechanism, r.Score, r.ModelFile, r.Claim.Epsilon, r.Claim.Delta, r.Claim.Rule)
	}
	if out.All != nil {
		fmt.Fprintf(s.stdout, "all %d selections together: privacy (epsilon %.4g, delta %.3g)\n", len(results), out.All.Epsilon, out.All.Delta)
	}
	fmt.Fprintf(s.stdout, "selection: %s\n", path)
	s.selections = out
	return nil
}

// cell is the k-th run of the selection (k from 1).
func (d *selectionDraws) cell(k int) sweepCell {
	c := d.Candidates[d.Draws[k-1]]
	c.Draw = k
	return c
}

// score adds the noisy validation score to a selection run's record,
// after checking that its plan accounts exactly the event the selection
// was charged for.
func (s *sweep) score(rec *sweepRecord, d *selectionDraws, k int) error {
	res := rec.Result
	if res.Plan == nil || !bytes.Equal(compactJSON(res.Plan.Ledger.Event), compactJSON(d.Events[d.Draws[k-1]])) {
		return fmt.Errorf("sweep: selection run %d at epsilon %g: its plan's accounting event differs from the one planned for the candidate", k, d.Epsilon)
	}
	if res.Final.Split != train.SplitValidation {
		return fmt.Errorf("sweep: selection run %d was evaluated on the %s split, not the validation split", k, res.Final.Split)
	}
	m := float64(d.Validation)
	count := math.Round(res.Final.Accuracy * m)
	if math.Abs(count/m-res.Final.Accuracy) > 1e-9 {
		return fmt.Errorf("sweep: selection run %d: accuracy %v is not a count of %d validation examples", k, res.Final.Accuracy, d.Validation)
	}
	rng, err := s.selectionRNG("sweep-score/" + rec.Cell.key())
	if err != nil {
		return err
	}
	// Integer count plus discrete Gaussian noise, exactly (docs/math.md
	// §11): the score has the distribution its accounting assumes.
	dg, err := noise.NewDiscreteGaussian(new(big.Rat).SetFloat64(scoreVariance(d.ScoreNoise)))
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	z := dg.Sample(rng)
	if !z.IsInt64() || math.Abs(float64(z.Int64())) > 1<<52 {
		return fmt.Errorf("sweep: selection run %d: noise out of range", k)
	}
	noisy := int64(count) + z.Int64()
	v := float64(noisy) / m
	rec.NoisyCount, rec.Score = &noisy, &v
	return nil
}

// scoreVariance is the variance of the score's discrete Gaussian noise
// for -select-noise s, and scoreSigma a multiplier no larger than its
// square root, for the accounting: the Rényi bound of N_Z(0, s^2) with
// an integer shift of 1 is at most that of N(0, s^2) (CKS Thm. 4), so
// Gaussian(scoreSigma) never understates it.
func scoreVariance(s float64) float64 { return s * s }

func scoreSigma(s float64) float64 {
	return math.Nextafter(math.Sqrt(scoreVariance(s)), 0)
}

func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// claimEpsilon is the selection's epsilon at its delta: K ~ d.Repetitions
// runs of a mechanism whose Rényi bound is the worst of the candidates'
// and of the score's Gaussian noise.
func (d *selectionDraws) claimEpsilon() (float64, error) {
	rdp, err := d.rdp()
	if err != nil {
		return 0, err
	}
	eps, err := accountant.RDPEpsilon(accountant.DefaultRDPOrders(), rdp, d.Delta)
	if err != nil {
		return 0, fmt.Errorf("sweep: selection at epsilon %g: %w", d.Epsilon, err)
	}
	return eps, nil
}

// rdp is the selection's Rényi bound at accountant.DefaultRDPOrders.
func (d *selectionDraws) rdp() ([]float64, error) {
	events := []accountant.Event{accountant.Gaussian(scoreSigma(d.ScoreNoise))}
	for _, raw := range d.Events {
		e, err := accountant.UnmarshalEvent(raw)
		if err != nil {
			return nil, fmt.Errorf("sweep: selection at epsilon %g: %w", d.Epsilon, err)
		}
		events = append(events, e)
	}
	rdp, err := accountant.SelectionRDP(events, d.Repetitions, accountant.DefaultRDPOrders())
	if err != nil {
		return nil, fmt.Errorf("sweep: selection at epsilon %g: %w", d.Epsilon, err)
	}
	return rdp, nil
}

// selectionOutput is selection.json: every selection, and the guarantee
// of releasing them all (their Rényi bounds add up).
type selectionOutput struct {
	Selections []selectionResult `json:"selections"`
	All        *struct {
		Epsilon float64 `json:"epsilon"`
		Delta   float64 `json:"delta"`
	} `json:"all_selections,omitempty"`
}

// combine states the guarantee of releasing every selection of draws.
func combine(draws []*selectionDraws, out *selectionOutput) error {
	if len(draws) < 2 {
		return nil
	}
	total := make([]float64, len(accountant.DefaultRDPOrders()))
	for _, d := range draws {
		rdp, err := d.rdp()
		if err != nil {
			return err
		}
		if d.Delta != draws[0].Delta {
			return fmt.Errorf("sweep: the selections' deltas differ (%g, %g)", draws[0].Delta, d.Delta)
		}
		for i := range total {
			total[i] += rdp[i]
		}
	}
	eps, err := accountant.RDPEpsilon(accountant.DefaultRDPOrders(), total, draws[0].Delta)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	out.All = &struct {
		Epsilon float64 `json:"epsilon"`
		Delta   float64 `json:"delta"`
	}{eps, draws[0].Delta}
	return nil
}

// selectBest picks the run of best score and states the selection's
// guarantee: K ~ d.Repetitions runs of a mechanism whose Rényi bound is
// the worst of the candidates' and of the score's Gaussian noise (an
// example is in the training split or in the validation split, never in
// both, under zero-out adjacency; docs/math.md §8).
func (s *sweep) selectBest(d *selectionDraws) (selectionResult, error) {
	res := selectionResult{Epsilon: d.Epsilon, Repetitions: d.Repetitions, K: d.K, Candidates: d.Candidates, Score: math.NaN()}
	eps, err := d.claimEpsilon()
	if err != nil {
		return res, err
	}
	res.Claim = selectionClaim{Epsilon: eps, Delta: d.Delta, Accountant: "rdp", Adjacency: accountant.ZeroOut,
		Rule: fmt.Sprintf("private selection, K ~ %s runs, best noisy validation score (Papernot & Steinke 2022)", d.Repetitions),
		Assumptions: []string{
			"the grid, the law of K and the score noise were fixed before any run; K and each run's candidate were drawn once, independently of the data, and recorded before the first run",
			"only the selection's result is released (selection.json, summary.md, summary.csv); the other runs and runs.jsonl, which holds every run's validation accuracy without noise, are not",
			fmt.Sprintf("score: the count of correctly classified examples among the last %d training examples (held out of training) plus discrete Gaussian noise N_Z(0, %g^2), sampled exactly; accounted as the Gaussian mechanism of multiplier %g (CKS 2020 Thm. 4)", d.Validation, d.ScoreNoise, d.ScoreNoise),
		}}
	runs := s.log.runs()
	var runAssumptions []string
	for k := 1; k <= d.K; k++ {
		rec, ok := runs[d.cell(k).key()]
		if !ok || rec.Score == nil || rec.Result == nil {
			continue // refused
		}
		if res.Selected == nil || *rec.NoisyCount > res.count {
			c := d.cell(k)
			res.Selected, res.Score, res.count = &c, *rec.Score, *rec.NoisyCount
			res.Mechanism = rec.Result.Plan.Mechanism
			runAssumptions = rec.Result.Plan.Ledger.Assumptions
		}
	}
	if res.Selected == nil {
		res.Score = 0
	}
	// The selected run's own assumptions (sampling, noise, seed) hold too.
	for _, a := range runAssumptions {
		res.Claim.Assumptions = appendNew(res.Claim.Assumptions, a)
	}
	return res, nil
}

// releaseModel writes the selected run's model to selected-epsE.model
// with the selection's claim, and removes the models of the selection's
// other runs, which are not released. A selection made by an earlier
// invocation has done so already.
func (s *sweep) releaseModel(res *selectionResult, d *selectionDraws) error {
	if res.Selected == nil {
		return nil
	}
	out := filepath.Join(s.dir, fmt.Sprintf("selected-eps%g.model", d.Epsilon))
	src := s.modelPath(*res.Selected)
	if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(out); err == nil {
			res.ModelFile = out
			return nil
		}
	}
	tr, err := models.ReadFile(src)
	if err != nil {
		return fmt.Errorf("sweep: the selected run's model: %w", err)
	}
	meta := tr.Metadata
	meta.Privacy = models.Privacy{Private: true, Epsilon: res.Claim.Epsilon, Delta: res.Claim.Delta,
		Mechanism: res.Mechanism, Accountant: "rdp (private selection)", Unit: "example", Assumptions: res.Claim.Assumptions,
		Notes: []string{fmt.Sprintf("selected by train sweep -select: the best of %d runs by a noisy validation score; the claim covers the selection, this model included", d.K)}}
	if err := models.WriteFile(out, tr.Model, meta); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	for k := 1; k <= d.K; k++ {
		os.Remove(s.modelPath(d.cell(k)))
	}
	res.ModelFile = out
	return nil
}
