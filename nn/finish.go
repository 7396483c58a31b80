package nn

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The end of a training step with several workers (finish): each worker,
// once through its chunks, flushes the gathered rows of its deferred
// dense layers (flushDense): the first to get there straight into dst,
// the other into its accumulator; meanwhile the sum of the accumulators
// is dealt out in jobs of about reduceJob entries to whichever worker is
// free, the deferred weights' jobs (adding the second flush) last. The
// worker that ends its chunks first flushes while the other still
// computes, and the last one's flush runs beside the other's share of the
// sum; before, each worker flushed into its accumulator, waited for the
// others, and summed a fixed share of all of them, the dense layers'
// megabyte included.
//
// The sums keep their bits: the first flush computes in dst what it
// computed in the cleared accumulator, and each entry of dst is then the
// two workers' sums added, which is commutative. With more than two
// workers the order would matter, so there the deferred layers are
// flushed into the accumulators and summed with the rest in worker
// order. Plans without deferred dense layers (WideResNet) keep the old
// end: there the sum alone gained nothing and measured 0.7-1% slower
// (BenchmarkWRNSwitches, four runs).

// reduceJob is the number of accumulator entries of one job of the end
// of a step's sum (a few dozen jobs for the CIFAR CNN's 2 MiB).
const reduceJob = 1 << 14

// endState is what the workers share at the end of a training step
// (finish).
type endState struct {
	// chunked counts the workers done with their chunks, turn those
	// that have started their flush, flushed those done with it; next
	// is the next sum job to take; left counts the workers other than
	// 0 still running; second is the worker that flushed into its
	// accumulator.
	chunked, turn, flushed, next, left, second atomic.Int32
	// jobs[v] lists the pieces of segments the sum covers: v = 0 all
	// of them, v = 1 all but the deferred dense weights, then those;
	// ends[v] the jobs' boundaries in it; jobs[1]'s from the job
	// deferJob on are over deferred weights.
	jobs     [2][]segment
	ends     [2][]int
	deferJob int
	// keep is the accumulator's entries but the deferred dense weights
	// (cleared at a step's start when finish flushes into dst).
	keep []segment
	// on is set when the plan has deferred dense layers (finishes).
	on bool
	// who[t] is the worker that flushed t-th (warm flushes: where its
	// sums of the deferred weights are, in[t]).
	who [2]atomic.Int32
	in  [2]atomic.Int32
	// scr is, per stage, the offset in w.ex of its deferred weights'
	// sums (flushWarm), -1 for the other stages; nil when they do not
	// fit in w.ex.
	scr []int
}

// Where a worker's sums of the deferred dense weights are once it has
// flushed (warm flushes).
const (
	inDst = iota // dst (flushInto)
	inAcc        // its accumulator
	inEx         // its per-example gradient buffer (endState.scr)
)

// endJobs cuts the segments into the sum's jobs (finish), with and
// without the deferred dense layers' weights.
func (p *Plan) endJobs() {
	var def []segment // deferred weights, in offset order
	for i := range p.stages {
		if s := &p.stages[i]; p.deferred(s) {
			def = append(def, segment{src: s.w.Offset, dst: s.w.Offset, n: s.w.Len})
		}
	}
	var parts []segment
	for _, sg := range p.segs {
		parts = append(parts, cutOut(sg, def)...)
	}
	e := &p.end
	e.jobs[0], e.ends[0] = cutJobs(p.segs, nil, nil)
	e.jobs[1], e.ends[1] = cutJobs(parts, nil, nil)
	e.deferJob = len(e.ends[1]) - 1
	e.jobs[1], e.ends[1] = cutJobs(def, e.jobs[1], e.ends[1])
	e.keep = cutOut(segment{n: len(p.params)}, def)
	e.on = len(def) > 0
	e.scr = make([]int, len(p.stages))
	off := 0
	for i := range p.stages {
		e.scr[i] = -1
		if s := &p.stages[i]; p.deferred(s) {
			e.scr[i] = off
			off += s.w.Len
		}
	}
	if off > p.exSlots(p.opt.Chunk)*p.exLen {
		e.scr = nil
	}
}

// cutJobs appends segments sgs to pieces, cut into jobs of reduceJob
// entries (the last one of fewer) whose ends it appends to ends.
func cutJobs(sgs, pieces []segment, ends []int) ([]segment, []int) {
	if ends == nil {
		ends = []int{0}
	}
	size := 0
	for _, sg := range sgs {
		for sg.n > 0 {
			n := min(sg.n, reduceJob-size)
			pieces = append(pieces, segment{src: sg.src, dst: sg.dst, n: n})
			sg.src, sg.dst, sg.n = sg.src+n, sg.dst+n, sg.n-n
			if size += n; size == reduceJob {
				ends, size = append(ends, len(pieces)), 0
			}
		}
	}
	if size > 0 {
		ends = append(ends, len(pieces))
	}
	return pieces, ends
}

// cutOut returns segment sg without the entries of the ranges in def
// (mapped to themselves, in offset order).
func cutOut(sg segment, def []segment) []segment {
	var out []segment
	for _, d := range def {
		lo, hi := max(sg.src, d.src), min(sg.src+sg.n, d.src+d.n)
		if lo >= hi {
			continue
		}
		if lo > sg.src {
			out = append(out, segment{src: sg.src, dst: sg.dst, n: lo - sg.src})
		}
		sg = segment{src: hi, dst: sg.dst + hi - sg.src, n: sg.src + sg.n - hi}
	}
	if sg.n > 0 {
		out = append(out, sg)
	}
	return out
}

// finishes reports whether the current step ends with finish.
func (p *Plan) finishes() bool {
	return p.mode == modeTrain && p.active > 1 && p.end.on && !p.opt.noFinish
}

// direct reports whether finish has the first worker through its chunks
// flush into dst (two workers; see above).
func (p *Plan) direct() bool { return p.active == 2 }

// startAcc clears worker w's accumulator for a training step: all of it,
// or, when finish may flush into dst, all but the deferred dense weights
// (flushDense clears those before its first flush into them).
func (p *Plan) startAcc(w *worker) {
	w.dn = 0
	if !p.finishes() || !p.direct() {
		clear(w.acc)
		w.accDense = true
		return
	}
	for _, k := range p.end.keep {
		clear(w.acc[k.src : k.src+k.n])
	}
	w.accDense = false
}

// startEnd resets the shared end state for a step that ends with finish
// (before the workers start).
func (p *Plan) startEnd() {
	e := &p.end
	e.chunked.Store(0)
	e.turn.Store(0)
	e.flushed.Store(0)
	e.next.Store(0)
	e.left.Store(int32(p.active - 1))
	if p.direct() {
		p.flushes.Add(p.active)
	}
}

// finish is worker wi's end of a training step once through its chunks:
// its dense rows flushed, then jobs of the sum of the accumulators into
// dst as long as there are any.
func (p *Plan) finish(w *worker, wi int) {
	e := &p.end
	v := 0
	if p.direct() {
		v = 1
	} else {
		p.flushDense(w)
	}
	e.chunked.Add(1)
	p.barrier.Done()
	if p.opt.finishHook != nil {
		p.opt.finishHook(wi)
	}
	warm := v == 1 && !p.opt.noWarmFlush
	if v == 1 {
		t := e.turn.Add(1) - 1
		switch {
		case warm && (t == 1 || !p.opt.directFirst):
			e.who[t].Store(int32(wi))
			e.in[t].Store(int32(p.flushWarm(w)))
			if t == 1 {
				e.second.Store(int32(wi))
			}
		case t == 0:
			p.flushInto(w)
			e.in[0].Store(inDst)
		default:
			p.flushDense(w)
			e.second.Store(int32(wi))
		}
		e.flushed.Add(1)
		p.flushes.Done()
	}
	jobs, ends := e.jobs[v], e.ends[v]
	for {
		if int(e.chunked.Load()) < p.active {
			// Another accumulator is still growing.
			spinWait(func() bool { return int(e.chunked.Load()) == p.active }, &p.barrier)
		}
		k := int(e.next.Add(1)) - 1
		if k >= len(ends)-1 {
			return
		}
		sgs := jobs[ends[k]:ends[k+1]]
		if v == 0 || k < e.deferJob {
			p.reduceSegs(sgs)
			continue
		}
		// The other worker may still be flushing.
		spinWait(func() bool { return int(e.flushed.Load()) == p.active }, &p.flushes)
		if warm {
			p.addFlushed(sgs)
			continue
		}
		acc := p.workers[e.second.Load()].acc
		for _, sg := range sgs {
			add(p.dst[sg.dst:sg.dst+sg.n], acc[sg.src:sg.src+sg.n])
		}
	}
}

// flushInto writes worker w's sums of its deferred dense layers into
// dst: its gathered rows' product (into zeros, as flushDense into its
// cleared accumulator), or, when it has flushed during the step,
// the rest into the accumulator, then that.
func (p *Plan) flushInto(w *worker) {
	if w.accDense {
		p.flushDense(w)
	}
	for i := range p.stages {
		s := &p.stages[i]
		if !p.deferred(s) {
			continue
		}
		d := p.dst[s.w.Offset : s.w.Offset+s.w.Len]
		if w.accDense {
			copy(d, w.acc[s.w.Offset:s.w.Offset+s.w.Len])
			continue
		}
		if w.dn == 0 {
			clear(d)
			continue
		}
		w.flushProduct(s, i, 0, d)
	}
	w.dn = 0
}

// flushWarm writes worker w's sums of its deferred dense layers where
// they are cheapest to write, and returns where (inAcc or inEx): the
// product of its gathered rows into w.ex (endState.scr), which the
// step's last examples have just used (in cache, and free until the
// next step), instead of into dst or the accumulator's deferred weights,
// written last a step ago; or, when it has flushed during the step
// (or w.ex is too short), the rest into its accumulator, as flushDense.
// The product into w.ex is the one flushDense makes into a cleared
// accumulator, bit for bit (denseBeta). Measured on the CIFAR CNN at
// batch 64 (BENCHMARKS.md): the flush took 145 us in the step against
// 269, the end of the step about 200 us less CPU (0.2% of the step).
func (p *Plan) flushWarm(w *worker) int {
	if w.accDense || p.end.scr == nil {
		p.flushDense(w)
		return inAcc
	}
	for i := range p.stages {
		s := &p.stages[i]
		if o := p.end.scr[i]; o >= 0 {
			w.flushProduct(s, i, 0, w.ex[o:o+s.w.Len])
		}
	}
	w.dn = 0
	return inEx
}

// addFlushed writes into dst the sum of the two workers' flushed sums of
// the deferred weights over the segments sgs (warm flushes): a + b, in
// either order the same bits, as the first flush into dst and the add of
// the second's accumulator gave.
func (p *Plan) addFlushed(sgs []segment) {
	for _, sg := range sgs {
		d := p.dst[sg.dst : sg.dst+sg.n]
		if p.end.in[0].Load() == inDst {
			add(d, p.flushed(1, sg))
			continue
		}
		addTo(d, p.flushed(0, sg), p.flushed(1, sg))
	}
}

// flushed is the entries of segment sg (of the deferred weights) in the
// sums that the t-th worker to flush has written (flushWarm).
func (p *Plan) flushed(t int, sg segment) []float32 {
	e := &p.end
	w := p.workers[e.who[t].Load()]
	if e.in[t].Load() == inAcc {
		return w.acc[sg.src : sg.src+sg.n]
	}
	i := p.deferredAt(sg.src)
	o := e.scr[i] + sg.src - p.stages[i].w.Offset
	return w.ex[o : o+sg.n]
}

// deferredAt is the deferred dense stage whose weight holds parameter k.
func (p *Plan) deferredAt(k int) int {
	for i := range p.stages {
		s := &p.stages[i]
		if p.deferred(s) && k >= s.w.Offset && k < s.w.Offset+s.w.Len {
			return i
		}
	}
	panic("nn: no deferred weight holds the entry")
}

// denseBeta is the beta of a flush of the deferred dense rows into an
// accumulator that holds sums (1), or into one not cleared this step
// (0: the product overwrites it). A product into zeros with beta 1
// computes 0 + P, which is P for every P but -0, and the products never
// give -0: their sums start from +0, and +0 plus -0 is +0. So beta 0
// gives the bits the cleared accumulator would have, without the clear
// and the product's read of the zeros.
func denseBeta(sums bool) float32 {
	if sums {
		return 1
	}
	return 0
}

// reduceSegs writes the sum of the active workers' accumulators over
// the segments sgs into dst (as reduce).
func (p *Plan) reduceSegs(sgs []segment) {
	accs := p.workers[:p.active]
	for _, sg := range sgs {
		d := p.dst[sg.dst : sg.dst+sg.n]
		copy(d, accs[0].acc[sg.src:sg.src+sg.n])
		for _, w := range accs[1:] {
			add(d, w.acc[sg.src:sg.src+sg.n])
		}
	}
}

// spinFor is how long a worker at the end of a step spins for the
// others before it sleeps (spinWait): about the time the runtime takes
// to wake a sleeping thread, and a few jobs of the sum.
const spinFor = 50 * time.Microsecond

// spinWait returns once ready reports true, which it does once wg is
// done: it polls ready for up to spinFor, then sleeps on wg.
func spinWait(ready func() bool, wg *sync.WaitGroup) {
	t0 := time.Now()
	for i := 1; !ready(); i++ {
		if i%64 == 0 && time.Since(t0) > spinFor {
			wg.Wait()
			return
		}
		runtime.Gosched()
	}
}

// awaitWorkers waits for the workers other than 0 to end the step,
// spinning briefly first when they are finishing the last jobs of the
// sum. It returns only once done is: a worker signals left before done
// (work), so a late worker's signals all land within its own step.
func (p *Plan) awaitWorkers() {
	if p.finishes() {
		spinWait(func() bool { return p.end.left.Load() == 0 }, &p.done)
	}
	p.done.Wait()
}
