package privacy

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/accountant"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/sampler"
)

// The band choice of bandmf:auto and toeplitz:auto (SPEC 7): under band
// sampling by amplified accounting (banded-MF App. F.4), under fixed-order
// epochs and shuffling by the loss under the sampler's own participation
// schema, without amplification (multi-epoch paper Sec. 3: the
// factorization with the least total squared error sens^2 ||B||_F^2 under
// the schema). This file is the one place the rule lives.

// resolveBands returns the mechanism to plan: mech itself, or for an
// AutoBanded one (bandmf:auto, toeplitz:auto) the band count the plan's
// sampling calls for (chooseBands under band sampling,
// chooseBandsUnamplified under fixed-order epochs or shuffling; one band
// is DP-SGD), with the factorization built for that count if any.
func (p *Plan) resolveBands(ctx context.Context, r Request, mech Mechanism) (Mechanism, *mfnoise.Factorization, error) {
	auto, ok := mech.(mfnoise.AutoBanded)
	if !ok || !mech.Structure().AutoBands {
		return mech, nil, nil
	}
	if err := p.checkAutoBands(r, mech); err != nil {
		return nil, nil, err
	}
	// A banded Toeplitz encoder's proxies are its own losses; any other
	// family's finalists are built and rescored.
	_, toeplitzOnly := mech.(mfnoise.BandedToeplitz)
	var sel *accountant.BandSelection
	var built map[int]*mfnoise.Factorization
	switch {
	case r.Sampling == SamplingAuto && r.Partitions == 0:
		var err error
		if sel, built, err = p.chooseSampling(ctx, r, auto, toeplitzOnly); err != nil {
			return nil, nil, err
		}
	case p.Sampling == SamplingBandPoisson:
		var err error
		if sel, built, err = chooseBands(ctx, p.acct, r, p.Delta, p.workload, auto, toeplitzOnly); err != nil {
			return nil, nil, err
		}
	case p.Sampling == SamplingBandAllocation:
		var err error
		if sel, built, err = chooseBandsAllocation(ctx, p.acct, r, p.Delta, p.workload, auto, toeplitzOnly); err != nil {
			return nil, nil, err
		}
	default:
		schema, err := unamplifiedSchema(r, p.Sampling)
		if err != nil {
			return nil, nil, err
		}
		if sel, built, err = chooseBandsUnamplified(ctx, p.acct, r, p.Delta, p.workload, schema, auto, toeplitzOnly); err != nil {
			return nil, nil, err
		}
	}
	p.BandTable = sel
	if bands := sel.Chosen().Bands; bands > 1 {
		return auto.WithBands(bands), built[bands], nil
	}
	return mfnoise.DPSGD{}, nil, nil
}

// checkAutoBands refuses what resolveBands refuses of an AutoBanded mech
// before it compares any band count: band-poisson sampling without a
// target epsilon, poisson sampling, and a sampling whose schema cannot be
// made.
func (p *Plan) checkAutoBands(r Request, mech Mechanism) error {
	if r.Sampling == SamplingAuto && r.Partitions == 0 {
		// chooseSampling falls back to fixed-order epochs when band
		// sampling cannot be planned.
		if r.Epsilon > 0 {
			return nil
		}
		if r.Quantile != nil {
			return refuse(RuleBands, "%s under band-poisson sampling needs a target epsilon to compare band counts by amplified accounting (and adaptive clipping, amplified accounting)", mech)
		}
		_, err := unamplifiedSchema(r, SamplingFixedOrder)
		return err
	}
	switch p.Sampling {
	case SamplingBandAllocation:
		return bandAllocationPlannable(r, mech)
	case SamplingBandPoisson:
		if !(r.Epsilon > 0) {
			return refuse(RuleBands, "%s under band-poisson sampling needs a target epsilon to compare band counts by amplified accounting", mech)
		}
		return nil
	case SamplingPoisson:
		return refuse(RuleBands, "%s with poisson sampling: a banded encoder is amplified only by band-poisson sampling; use band-poisson (amplified) or fixed-order or shuffle (unamplified)", mech)
	}
	_, err := unamplifiedSchema(r, p.Sampling)
	return err
}

// SamplingChoice records how the plan's sampling was chosen when the
// request named none and the mechanism chooses its bands (bandmf:auto,
// toeplitz:auto): each regime's own band choice and the noise it adds.
type SamplingChoice struct {
	Chosen  Sampling         `json:"chosen"`
	Options []SamplingOption `json:"options"`
}

// SamplingOption is one regime of a SamplingChoice: the band count it
// chose and its score sigma^2 sens^2 ||B||_F^2 (the expected squared
// error the noise adds to the workload's outputs, in units of the clip
// norm squared), or why it could not be planned.
type SamplingOption struct {
	Sampling Sampling `json:"sampling"`
	Bands    int      `json:"bands,omitempty"`
	Score    float64  `json:"score,omitempty"`
	Err      string   `json:"error,omitempty"`
}

// String is the choice in one line.
func (c *SamplingChoice) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s chosen by default, the least expected noise (sigma^2 sens^2 ||B||_F^2, in clip norms squared):", c.Chosen)
	for i, o := range c.Options {
		if i > 0 {
			sb.WriteString(";")
		}
		if o.Err != "" {
			fmt.Fprintf(&sb, " %s not possible (%s)", o.Sampling, o.Err)
			continue
		}
		fmt.Fprintf(&sb, " %s %.4g with %d bands", o.Sampling, o.Score, o.Bands)
	}
	return sb.String()
}

// chooseSampling is the default sampling of an AutoBanded mechanism (the
// request names none): band sampling (amplified, chooseBands), fixed-order
// epochs (unamplified, chooseBandsUnamplified) and band allocation
// (amplified by random allocation within the partitions,
// chooseBandsAllocation) each choose their band count as they would if
// asked, and the plan takes the regime whose choice scores least (the
// first of them on a tie). The scores measure the same thing in every
// regime, the expected squared error sigma^2 sens^2 ||B||_F^2 the noise
// adds to the workload (per participation, sens = 1, when amplified; for
// the whole (k,b) schema when not), so the least is the best result
// expected of the mechanism. The amplified regimes need a target epsilon
// and a band count that amplifies, and band allocation an accountant with
// random allocation (PLD) and no adaptive clipping; a regime that cannot
// be planned is recorded with its reason, and if none can, band sampling's
// error is returned. The choice is recorded in p.DefaultSampling. A
// request that names band partitions (Partitions) asks for band sampling
// and is not compared.
func (p *Plan) chooseSampling(ctx context.Context, r Request, auto mfnoise.AutoBanded, toeplitzOnly bool) (*accountant.BandSelection, map[int]*mfnoise.Factorization, error) {
	type regime struct {
		sel   *accountant.BandSelection
		built map[int]*mfnoise.Factorization
		err   error
	}
	var amp, fixed regime
	if r.Epsilon > 0 {
		amp.sel, amp.built, amp.err = chooseBands(ctx, p.acct, r, p.Delta, p.workload, auto, toeplitzOnly)
	} else {
		amp.err = refuse(RuleBands, "%s under band-poisson sampling needs a target epsilon to compare band counts by amplified accounting", auto)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	schema, err := unamplifiedSchema(r, SamplingFixedOrder)
	if err == nil && r.Quantile != nil {
		err = refuse(RuleAmplification, "adaptive clipping needs amplified accounting (Poisson or band sampling), not %s sampling", SamplingFixedOrder)
	}
	if err == nil {
		fixed.sel, fixed.built, fixed.err = chooseBandsUnamplified(ctx, p.acct, r, p.Delta, p.workload, schema, auto, toeplitzOnly)
	} else {
		fixed.err = err
	}
	var alloc regime
	if alloc.err = bandAllocationPlannable(r, auto); alloc.err == nil {
		alloc.sel, alloc.built, alloc.err = chooseBandsAllocation(ctx, p.acct, r, p.Delta, p.workload, auto, toeplitzOnly)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if amp.err != nil && fixed.err != nil && alloc.err != nil {
		return nil, nil, amp.err
	}
	c := &SamplingChoice{}
	var pick regime
	for _, g := range []struct {
		s Sampling
		r regime
	}{{SamplingBandPoisson, amp}, {SamplingFixedOrder, fixed}, {SamplingBandAllocation, alloc}} {
		o := SamplingOption{Sampling: g.s}
		if g.r.err != nil {
			o.Err = g.r.err.Error()
		} else {
			o.Bands, o.Score = g.r.sel.Chosen().Bands, g.r.sel.Chosen().Score
			if c.Chosen == "" || o.Score < pick.sel.Chosen().Score {
				pick, c.Chosen = g.r, g.s
			}
		}
		c.Options = append(c.Options, o)
	}
	p.Sampling, p.DefaultSampling = c.Chosen, c
	return pick.sel, pick.built, nil
}

// bandAllocationPlannable refuses what an auto mechanism cannot plan under
// band allocation: without a target epsilon there is nothing to compare
// band counts by, and adaptive clipping has no accounting there.
func bandAllocationPlannable(r Request, mech fmt.Stringer) error {
	if !(r.Epsilon > 0) {
		return refuse(RuleBands, "%s under band-allocation sampling needs a target epsilon to compare band counts by amplified accounting", mech)
	}
	if r.Quantile != nil {
		return refuse(RuleAmplification, "%s: adaptive clipping is not accounted under band-allocation sampling", mech)
	}
	return nil
}

// chooseBandsAllocation chooses the band count of an AutoBanded mechanism
// under band allocation (sampler.NewBandAllocation) as chooseBands does
// under band sampling: for each candidate b = 1, 2, 4, ... whose
// partitions hold at least two batches (t = floor(floor(m/b)/B) >= 2
// steps a band epoch, so that random allocation amplifies), it calibrates
// sigma to the target for b partitions (NewAllocationSampling) and scores
// sigma^2 times the loss of the optimal b-banded Toeplitz encoder under
// single participation; bandmf:auto's finalists within proxyMargin of the
// best are built and rescored by their own losses (refineFinalists). One
// band is DP-SGD under random allocation.
func chooseBandsAllocation(ctx context.Context, acct accountant.Accountant, r Request, delta float64, w dpcore.Workload, auto mfnoise.AutoBanded, toeplitzOnly bool) (*accountant.BandSelection, map[int]*mfnoise.Factorization, error) {
	what := auto.String() + " under band-allocation sampling"
	if acct.Name() != string(PLD) {
		return nil, nil, refuse(RuleAmplification, "%s: random allocation is accounted only by the pld accountant, not %s", what, acct.Name())
	}
	single := dpcore.SingleParticipation()
	sel := &accountant.BandSelection{Best: -1}
	for b := 1; b <= r.Steps && r.Examples/b/r.Batch >= 2; b *= 2 {
		comp, err := NewAllocationSampling(r.Examples, r.Batch, b)
		if err != nil {
			return nil, nil, err
		}
		loss, err := toeplitzLoss(ctx, w, b, single, r.Build)
		if err != nil {
			return nil, nil, fmt.Errorf("privacy: %s: %d bands: %w", what, b, err)
		}
		cal, err := comp.Calibrate(ctx, acct, r.Steps, r.Epsilon, delta)
		if err != nil {
			return nil, nil, fmt.Errorf("privacy: %s: %d bands: %w", what, b, err)
		}
		row := accountant.BandChoice{BandCandidate: accountant.BandCandidate{Bands: b, Loss: loss, Proxy: b > 1 && !toeplitzOnly},
			Q: comp.Rate(), Compositions: comp.Compositions(r.Steps), Sigma: cal.Sigma, Epsilon: cal.Epsilon}
		sigmaScore(&row, loss)
		sel.Table = append(sel.Table, row)
		if sel.Best < 0 || row.Score < sel.Table[sel.Best].Score {
			sel.Best = len(sel.Table) - 1
		}
	}
	if len(sel.Table) == 0 {
		return nil, nil, refuse(RuleBands, "%s: batch %d of %d examples leaves no band count whose partitions hold two batches (random allocation over one step does not amplify)", what, r.Batch, r.Examples)
	}
	if toeplitzOnly {
		return sel, nil, nil
	}
	built, err := refineFinalists(ctx, sel, r, w, single, auto, sigmaScore, func(_ accountant.BandChoice, near bool) bool { return near })
	if err != nil {
		return nil, nil, err
	}
	return sel, built, nil
}

// unamplifiedSchema is the participation schema the sampler of an
// unamplified sampling realizes for the request (the schema does not
// depend on the number of partitions or the seed).
func unamplifiedSchema(r Request, samp Sampling) (dpcore.Schema, error) {
	s, err := newSampler(samp, r.Examples, r.Batch, 1, r.Steps, DeriveSeed(r.Seed, "sampler"))
	if err != nil {
		return dpcore.Schema{}, err
	}
	if k := s.Accounting().Kind; k == sampler.AccountingPoisson || k == sampler.AccountingBandPoisson {
		return dpcore.Schema{}, invalidf("%s sampling is amplified", samp)
	}
	return s.Schema(), nil
}

// proxyMargin is how far below its banded Toeplitz proxy a candidate's
// banded-MF loss may lie and still be refined. A b-banded Toeplitz encoder
// scaled to sensitivity 1 is a feasible point of b-banded MF, so the proxy
// bounds the banded-MF optimum from above; measured, the optimum lies 0.1%
// (8 bands) to 3% (128 bands) below it at n = 500 and 3.3% at n = 2000 with
// 100 bands (BENCHMARKS.md).
const proxyMargin = 0.06

// chooseBands calibrates sigma for each candidate band count b = 1, 2, 4,
// ... that can amplify (b < m/B) and picks the smallest sigma_b^2 * Loss_b
// (banded-MF App. F.4).
//
// Every candidate is first scored by its proxy: the loss of the optimal
// b-banded Toeplitz encoder (OptimizeToeplitz, O(n b) per evaluation,
// milliseconds) under single participation, evaluated on the workload
// itself. For toeplitz:auto (toeplitzOnly) the proxies are the
// candidates' losses. For bandmf:auto, the proxies bound the banded-MF
// losses from above; every candidate whose proxy score is within
// proxyMargin of the best is then optimized as bandmf (at the request's
// settings, through its cache) and scored by its actual loss, and the
// choice is made among those (refineFinalists). Only the finalists are
// built; built holds them by band count. Rows scored by a proxy are
// marked Proxy in the table.
func chooseBands(ctx context.Context, acct accountant.Accountant, r Request, delta float64, w dpcore.Workload, auto mfnoise.AutoBanded, toeplitzOnly bool) (*accountant.BandSelection, map[int]*mfnoise.Factorization, error) {
	what := auto.String()
	single := dpcore.SingleParticipation()
	var cands []accountant.BandCandidate
	limit := min(r.Steps, r.Examples/r.Batch-1)
	for b := 1; b <= limit; b *= 2 {
		loss, err := toeplitzLoss(ctx, w, b, single, r.Build)
		if err != nil {
			return nil, nil, fmt.Errorf("privacy: %s: %d bands: %w", what, b, err)
		}
		cands = append(cands, accountant.BandCandidate{Bands: b, Loss: loss, Proxy: b > 1 && !toeplitzOnly})
	}
	if len(cands) == 0 {
		return nil, nil, refuse(RuleBands, "%s: batch %d of %d examples leaves no band count that amplifies", what, r.Batch, r.Examples)
	}
	sel, err := accountant.SelectBands(acct, r.Epsilon, delta, r.Examples, r.Batch, r.Steps, cands)
	if err != nil {
		return nil, nil, calibrationError(what, r.Epsilon, err)
	}
	score := r.amplifiedScore()
	if r.Quantile != nil {
		for i := range sel.Table {
			if sel.Table[i].Err == "" {
				score(&sel.Table[i], sel.Table[i].Loss)
			}
		}
		if err := pickBest(&sel, false); err != nil {
			return nil, nil, refuse(RuleBudget, "%s with adaptive clipping: %v", what, err)
		}
	}
	if toeplitzOnly {
		return &sel, nil, nil
	}
	built, err := refineFinalists(ctx, &sel, r, w, single, auto, score, func(_ accountant.BandChoice, near bool) bool { return near })
	if err != nil {
		return nil, nil, err
	}
	return &sel, built, nil
}

// chooseBandsUnamplified chooses the band count for an unamplified schema
// (fixed-order epochs' (k,b)-participation, shuffling's min-separation).
// The accounting is one Gaussian mechanism whatever the encoder, with its
// sensitivity under the schema normalized to 1, so every candidate has
// the same sigma (calibrated to the target epsilon, or the request's noise
// multiplier) and the choice minimizes the loss sens^2 ||B||_F^2 under the
// schema, with the sensitivity the plan then uses (exact, or the proven
// bound of SPEC 3).
//
// The candidates are unamplifiedCandidates: powers of two below the
// schema's separation, the separation (under (k,b) and min-sep, a
// b-banded encoder with unit column norms has sensitivity sqrt(k) exactly
// when b is at most the separation, banded-MF Thm 2: the most such bands
// is often the best count) and two multiples of it. Each is scored
// first by the optimal b-banded Toeplitz encoder for the workload
// optimized under the schema itself: toeplitz:auto takes those as its
// losses; bandmf:auto optimizes as bandmf the separation's count and the
// candidates below it within proxyMargin of the best (under shuffling,
// whose separation is 1, the two best within proxyMargin) and chooses
// among those by their losses under the schema (refineFinalists). bandmf
// is optimized for unit column norms, which is the schema's sensitivity
// (times sqrt(k)) only up to the separation: past it the participations
// overlap and bandmf, blind to that, lost to the schema-optimized
// Toeplitz proxy (at n = 600 under (30,20) the proxies with 32 to 128
// bands were within 0.3% of 20 bands', and building them as bandmf took
// 9 to 49 s each). The proxies only rank: under the schema bandmf can
// also lose to its proxy when the last epoch is cut short (n not a
// multiple of b), which its own score then shows.
func chooseBandsUnamplified(ctx context.Context, acct accountant.Accountant, r Request, delta float64, w dpcore.Workload, schema dpcore.Schema, auto mfnoise.AutoBanded, toeplitzOnly bool) (*accountant.BandSelection, map[int]*mfnoise.Factorization, error) {
	what := auto.String()
	sigma, eps := r.NoiseMultiplier, r.Epsilon
	if !(sigma > 0) {
		cal, err := Composition{}.Calibrate(ctx, acct, r.Steps, r.Epsilon, delta)
		if err != nil {
			return nil, nil, err
		}
		sigma, eps = cal.Sigma, cal.Epsilon
	} else {
		e, err := Composition{}.Epsilon(acct, sigma, r.Steps, delta)
		if err != nil {
			return nil, nil, err
		}
		eps = e
	}
	sel := &accountant.BandSelection{Best: -1}
	for _, b := range unamplifiedCandidates(r.Steps, schema) {
		loss, err := toeplitzLoss(ctx, w, b, schema, r.Build)
		if err != nil {
			return nil, nil, fmt.Errorf("privacy: %s: %d bands under %s: %w", what, b, schema, err)
		}
		row := accountant.BandChoice{BandCandidate: accountant.BandCandidate{Bands: b, Loss: loss, Proxy: b > 1 && !toeplitzOnly},
			Compositions: 1, Sigma: sigma, Epsilon: eps, Score: sigma * sigma * loss}
		sel.Table = append(sel.Table, row)
		if sel.Best < 0 || row.Score < sel.Table[sel.Best].Score {
			sel.Best = len(sel.Table) - 1
		}
	}
	if toeplitzOnly {
		return sel, nil, nil
	}
	// Finalists: the separation's count, the near ones up to it, and,
	// when the separation is 1 (shuffling), the two best near ones.
	sep := min(r.Steps, schema.B)
	var near []int
	for _, row := range sel.Table {
		if row.Proxy && row.Score*(1-proxyMargin) <= sel.Chosen().Score {
			near = append(near, row.Bands)
		}
	}
	slices.SortFunc(near, func(a, b int) int { return cmpScore(sel, a, b) })
	admit := func(row accountant.BandChoice, isNear bool) bool {
		if row.Bands == sep || (isNear && row.Bands <= sep) {
			return true
		}
		return sep == 1 && slices.Index(near, row.Bands) >= 0 && slices.Index(near, row.Bands) < 2
	}
	built, err := refineFinalists(ctx, sel, r, w, schema, auto, sigmaScore, admit)
	if err != nil {
		return nil, nil, err
	}
	return sel, built, nil
}

// unamplifiedCandidates are the band counts chooseBandsUnamplified
// compares for n steps under the schema, ascending: 1, 2, 4, ... below the
// separation sep (the b of (k,b) or min-sep), sep, 2 sep and 4 sep, none
// above n. With a separation of 1 (shuffling) that is 1, 2, 4, ... up to
// n, and n. Past the separation a banded encoder's participations
// overlap and its sensitivity grows; at n = 600 under (30,20) the banded
// Toeplitz optimum with 32 to 600 bands lost 0.2% to 2% to 20 bands, and
// each doubling of the bands doubles the cost of a proxy.
func unamplifiedCandidates(n int, schema dpcore.Schema) []int {
	sep := n
	if schema.Kind != dpcore.Single {
		sep = min(schema.B, n)
	}
	var c []int
	for b := 1; b < sep; b *= 2 {
		c = append(c, b)
	}
	if sep == 1 {
		for b := 2; b < n; b *= 2 {
			c = append(c, b)
		}
	}
	for _, b := range []int{sep, 2 * sep, 4 * sep} {
		if b <= n {
			c = append(c, b)
		}
	}
	if sep == 1 && n > 1 {
		c = append(c, n)
	}
	slices.Sort(c)
	return slices.Compact(c)
}

// refineFinalists optimizes as bandmf (auto's family) the proxy rows of
// sel the finalist rule admits (admit(row) for a row within proxyMargin
// of the best proxy score), rescores each by its own loss at its
// sensitivity under schema (sigma depends on the band count alone, so
// without recalibrating) and moves sel.Best to the least score among the
// rows that are not proxies: the chosen row's loss is the planned
// mechanism's own. It returns the built factorizations by band count.
func refineFinalists(ctx context.Context, sel *accountant.BandSelection, r Request, w dpcore.Workload, schema dpcore.Schema, auto mfnoise.AutoBanded, score func(row *accountant.BandChoice, loss float64), admit func(row accountant.BandChoice, near bool) bool) (map[int]*mfnoise.Factorization, error) {
	what := auto.String()
	built := map[int]*mfnoise.Factorization{}
	best := sel.Chosen().Score
	for i, row := range sel.Table {
		if !row.Proxy || row.Err != "" || !admit(row, row.Score*(1-proxyMargin) <= best) {
			continue
		}
		f, err := mfnoise.BuildDense(ctx, auto.WithBands(row.Bands), w, schema, r.Build)
		if err != nil {
			return nil, fmt.Errorf("privacy: %s: %d bands: %w", what, row.Bands, err)
		}
		sens, err := f.Sensitivity(schema)
		if err != nil {
			return nil, fmt.Errorf("privacy: %s: %d bands: %w", what, row.Bands, err)
		}
		built[row.Bands] = f
		loss := f.LossAt(sens.Value)
		sel.Table[i].Loss, sel.Table[i].Proxy = loss, false
		score(&sel.Table[i], loss)
	}
	if err := pickBest(sel, true); err != nil {
		return nil, fmt.Errorf("privacy: %s: %w", what, err)
	}
	return built, nil
}

// sigmaScore scores a row by the noise its mechanism adds: sigma^2 times
// its loss.
func sigmaScore(row *accountant.BandChoice, loss float64) {
	row.Score = row.Sigma * row.Sigma * loss
}

// amplifiedScore is how an amplified plan scores a band count: by the
// gradient's own noise. Without adaptive clipping that is sigmaScore;
// with it (r.Quantile), the multiplier the joint rule leaves the gradient,
// QuantileRelease.GradientSigma(sigma_b), and a candidate whose sigma the
// count's noise leaves nothing is out (its row's Err says why).
func (r Request) amplifiedScore() func(row *accountant.BandChoice, loss float64) {
	if r.Quantile == nil {
		return sigmaScore
	}
	return func(row *accountant.BandChoice, loss float64) {
		gs, err := r.Quantile.GradientSigma(row.Sigma)
		if err != nil {
			row.Err, row.Score = err.Error(), 0
			return
		}
		row.Score = gs * gs * loss
	}
}

// pickBest points sel.Best at the least score among the rows without an
// error (and, with builtOnly, that are not proxies).
func pickBest(sel *accountant.BandSelection, builtOnly bool) error {
	sel.Best = -1
	for i, row := range sel.Table {
		if row.Err == "" && !(builtOnly && row.Proxy) && (sel.Best < 0 || row.Score < sel.Table[sel.Best].Score) {
			sel.Best = i
		}
	}
	if sel.Best < 0 {
		return fmt.Errorf("no band count is left: %w", accountant.ErrInfeasible)
	}
	return nil
}

// cmpScore orders band counts a and b by their rows' scores in sel.
func cmpScore(sel *accountant.BandSelection, a, b int) int {
	score := func(bands int) float64 {
		for _, row := range sel.Table {
			if row.Bands == bands {
				return row.Score
			}
		}
		return math.Inf(1)
	}
	sa, sb := score(a), score(b)
	switch {
	case sa < sb:
		return -1
	case sa > sb:
		return 1
	}
	return a - b
}

// toeplitzLoss is the loss of the optimal bands-banded Toeplitz encoder for
// w optimized under the schema (DP-SGD for one band), at its sensitivity
// under the schema (per participation under single participation).
func toeplitzLoss(ctx context.Context, w dpcore.Workload, bands int, schema dpcore.Schema, opt mfnoise.BuildOptions) (float64, error) {
	var m Mechanism = mfnoise.BandedToeplitz{Bands: bands}
	if bands == 1 {
		m = mfnoise.DPSGD{}
	}
	t, err := m.Build(ctx, w, schema, opt)
	if err != nil {
		return 0, err
	}
	sens, err := t.Sensitivity(schema)
	if err != nil {
		return 0, err
	}
	return dpcore.LossAt(t, sens.Value)
}
