package nn

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestArenaCarve checks the arena's carving: the sizing pass counts
// what the second pass carves, each buffer has its length and capacity,
// starts on a cache line (and the large ones on a line of the page that
// the previous large ones do not start on), lies within the allocation
// past its 2 MiB boundary, is zero, and overlaps no other.
func TestArenaCarve(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := make([]int, 80)
	for k := range sizes {
		switch k % 4 {
		case 0:
			sizes[k] = rng.IntN(20)
		case 1:
			sizes[k] = rng.IntN(2000)
		default:
			sizes[k] = rng.IntN(300000)
		}
	}
	testArenaCarve(t, sizes)
	var small []int // under minHugeFloats in all
	for k, n := range sizes {
		if k%4 < 2 {
			small = append(small, n)
		}
	}
	testArenaCarve(t, small)
}

func testArenaCarve(t *testing.T, sizes []int) {
	var size arena
	for _, n := range sizes {
		if b := size.f32(n); len(b) != n {
			t.Fatalf("sizing: %d floats, want %d", len(b), n)
		}
	}
	for _, noHuge := range []bool{false, true} {
		a := newArena(size.off, noHuge, true)
		lo := uintptr(unsafe.Pointer(&a.buf[a.base]))
		t.Logf("%d buffers, %d floats, huge pages asked %v", len(sizes), size.off, size.off >= minHugeFloats && !noHuge)
		if big := size.off >= minHugeFloats; big && lo%(2<<20) != 0 {
			t.Errorf("carving starts at %#x, not on a 2 MiB boundary", lo)
		} else if !big && len(a.buf) != size.off {
			t.Errorf("small arena of %d floats for %d", len(a.buf), size.off)
		}
		type span struct{ lo, hi uintptr }
		var spans []span
		var colours []uintptr
		for _, n := range sizes {
			b := a.f32(n)
			if len(b) != n || cap(b) != n {
				t.Fatalf("buffer of %d floats: len %d cap %d", n, len(b), cap(b))
			}
			if b == nil {
				t.Fatalf("buffer of %d floats is nil", n)
			}
			if n == 0 {
				continue
			}
			s := uintptr(unsafe.Pointer(&b[0]))
			e := s + 4*uintptr(n)
			if s%64 != 0 {
				t.Errorf("buffer of %d floats at %#x: not on a cache line", n, s)
			}
			if s < lo || e > uintptr(unsafe.Pointer(&a.buf[0]))+4*uintptr(len(a.buf)) {
				t.Errorf("buffer [%#x, %#x) outside the arena", s, e)
			}
			if n >= pageFloats {
				c := s % 4096
				for k := max(0, len(colours)-8); k < len(colours); k++ {
					if colours[k] == c {
						t.Errorf("large buffer %d starts at line %d of its page, as large buffer %d", len(colours), c/64, k)
					}
				}
				colours = append(colours, c)
			}
			for k, v := range b {
				if v != 0 {
					t.Fatalf("buffer of %d floats: entry %d is %g", n, k, v)
				}
			}
			for k := range b {
				b[k] = float32(len(spans) + 1)
			}
			spans = append(spans, span{s, e})
		}
		if a.off != size.off {
			t.Errorf("carved %d floats, the sizing pass counted %d", a.off, size.off)
		}
		// Each buffer still holds its own mark: no later one overlapped
		// it.
		k := 0
		a2 := *a
		a2.off, a2.big = 0, 0
		for _, n := range sizes {
			b := a2.f32(n)
			if n == 0 {
				continue
			}
			k++
			for _, v := range b {
				if v != float32(k) {
					t.Fatalf("buffer %d holds %g: overlapped", k, v)
				}
			}
		}
		runtime.KeepAlive(a)
	}
}

// workerFloats returns every float32 buffer a worker holds (its slot's
// and its own, not the other slots').
func workerFloats(w *worker) [][]float32 {
	var out [][]float32
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch {
		case v.Type() == reflect.TypeFor[[]float32]():
			if v.Len() > 0 {
				out = append(out, unsafe.Slice((*float32)(v.UnsafePointer()), v.Len()))
			}
		case v.Type() == reflect.TypeFor[[][]float32]():
			for k := range v.Len() {
				walk(v.Index(k))
			}
		case v.Kind() == reflect.Struct && v.Type() == reflect.TypeFor[slot]():
			for k := range v.NumField() {
				walk(v.Field(k))
			}
		}
	}
	v := reflect.ValueOf(w).Elem()
	for k := range v.NumField() {
		walk(v.Field(k))
	}
	return out
}

// TestArenaPlan checks that a plan's worker buffers and weight copies
// lie in its arenas and
// that plans with and without the arena or its huge pages give the same
// clipped sums and per-example norms, bit for bit.
func TestArenaPlan(t *testing.T) {
	nets := map[string]*builder{"head": headNet(), "cifar": cifarCNN()}
	for name, b := range nets {
		rng := rand.New(rand.NewPCG(7, 8))
		params := randParams(rng, b.n)
		for k := range params {
			params[k] *= 0.3
		}
		n := 37
		x, y := b.batch(rng, n, 10)
		var want []float32
		var wantSq [][]float64
		for _, v := range []string{"noarena", "default", "nohugepages"} {
			opt := Options{MaxBatch: n, Workers: 2, noArena: v == "noarena", noHugePages: v == "nohugepages"}
			p, err := NewPlan(b.net, params, opt)
			if err != nil {
				t.Fatal(err)
			}
			for wi, w := range p.workers {
				if (w.mem == nil) != opt.noArena {
					t.Fatalf("%s %s: worker %d arena %v", name, v, wi, w.mem)
				}
				if w.mem == nil {
					continue
				}
				for _, f := range workerFloats(w) {
					if !w.mem.holds(f) && !w.cold.holds(f) {
						t.Errorf("%s %s: worker %d buffer of %d floats outside its arenas", name, v, wi, len(f))
					}
				}
			}
			if m := p.mem; m != nil {
				lo := uintptr(unsafe.Pointer(&m.buf[0]))
				hi := lo + 4*uintptr(len(m.buf))
				in := func(f []float32) bool {
					s := uintptr(unsafe.Pointer(&f[0]))
					return s >= lo && s+4*uintptr(len(f)) <= hi
				}
				for i := range p.stages {
					s := &p.stages[i]
					for _, f := range [][]float32{s.wp, s.wflip} {
						if len(f) > 0 && !in(f) {
							t.Errorf("%s %s: stage %d: a weight copy of %d floats outside the arena", name, v, i, len(f))
						}
					}
				}
			}
			sum := make([]float32, b.n)
			cl := &testClipper{sq: make([][]float64, n)}
			for range 2 {
				if _, err := p.Step(x, y, sum, cl); err != nil {
					t.Fatal(err)
				}
			}
			if want == nil {
				want, wantSq = sum, cl.sq
				continue
			}
			for k := range sum {
				if math.Float32bits(sum[k]) != math.Float32bits(want[k]) {
					t.Fatalf("%s %s: sum[%d] = %g, want %g", name, v, k, sum[k], want[k])
				}
			}
			if !reflect.DeepEqual(cl.sq, wantSq) {
				t.Fatalf("%s %s: per-example norms differ", name, v)
			}
		}
	}
}

// coldMark is what TestColdUntouched fills the cold arenas with: a NaN
// that any arithmetic reading it would carry into the results.
const coldMark = 0x7fc0c01d

// TestColdUntouched: the private training steps (whole, with and
// without a clipper on the CIFAR CNN's and WideResNet-16-4's plans, and
// in StepAdd pieces) and Gradients neither read nor write a buffer
// carved from a worker's cold arena (buildWorker's classification):
// every cold arena filled with a NaN mark before, they give the
// reference plan's (Options.noColdSplit) losses, per-example norms,
// sums and gradients, bit for bit, and leave the marks as they were.
// Batches 1, 3, 64 and 65 on the test networks, the network of the
// dense head read in place and warmNet, one and two workers, chunks of
// 2 and the automatic size (the CIFAR CNN: batches 64 and 65), and
// WideResNet-16-4's at 5 (chunks of 2) without -short.
func TestColdUntouched(t *testing.T) {
	type net struct {
		net    Network
		params []float32
		batch  func(n int) ([]float32, []int)
		ns     []int
	}
	nets := map[string]net{}
	rng := rand.New(rand.NewPCG(61, 62))
	add := func(name string, b *builder, ns ...int) {
		params := randParams(rng, b.n)
		for k := range params {
			params[k] *= 0.3
		}
		batch := func(n int) ([]float32, []int) { return b.batch(rng, n, b.classes()) }
		nets[name] = net{b.net, params, batch, ns}
	}
	for name, b := range testNets() {
		add(name, b, 1, 3, 64, 65)
	}
	add("head", headNet(), 1, 3, 64, 65)
	add("warm", warmNet(), 3, 65)
	add("cifar", cifarCNN(), 64, 65)
	if !testing.Short() {
		wrn, params := wrnNet(16, rng)
		batch := func(n int) ([]float32, []int) { return randomBatch(rng, wrn.Input.Size(), n, 10) }
		nets["wrn"] = net{wrn, params, batch, []int{5}}
	}
	some := map[string]bool{}
	for name, c := range nets {
		for _, n := range c.ns {
			for _, workers := range []int{1, 2} {
				for _, chunk := range []int{0, 2} {
					if name == "cifar" && workers == 1 && chunk == 2 || name == "wrn" && (workers == 1 || chunk == 0) {
						continue
					}
					opt := Options{MaxBatch: max(n, 64), Workers: workers, Chunk: chunk}
					if name == "warm" {
						opt.deferMin = 1
					}
					p, err := NewPlan(c.net, c.params, opt)
					if err != nil {
						t.Fatal(err)
					}
					if p.workers[0].cold == nil {
						continue
					}
					some[name] = true
					opt.noColdSplit = true
					ref, err := NewPlan(c.net, c.params, opt)
					if err != nil {
						t.Fatal(err)
					}
					if ref.workers[0].cold != nil {
						t.Fatalf("%s: a cold arena with Options.noColdSplit", name)
					}
					t.Run(fmt.Sprintf("%s/n%d/w%d/c%d", name, n, workers, chunk), func(t *testing.T) {
						x, y := c.batch(n)
						if p.stages[0].kind != kEmbed {
							oddInputs(x, n)
						}
						for _, w := range p.workers {
							for k := range w.cold.buf {
								w.cold.buf[k] = math.Float32frombits(coldMark)
							}
						}
						privateSteps(t, p, ref, x, y, len(c.params))
						for wi, w := range p.workers {
							for k, v := range w.cold.buf {
								if math.Float32bits(v) != coldMark {
									t.Fatalf("worker %d: cold float %d of %d written (%g)", wi, k, len(w.cold.buf), v)
								}
							}
						}
					})
				}
			}
		}
	}
	for name := range nets {
		if name != "mlp" && !some[name] {
			t.Errorf("%s: no plan with a cold arena", name)
		}
	}
}

// classes is the length of b's output.
func (b *builder) classes() int {
	shapes, err := b.net.Shapes()
	if err != nil {
		panic(err)
	}
	return shapes[len(shapes)-1].C
}

// randomBatch returns n examples of size floats and labels among classes.
func randomBatch(rng *rand.Rand, size, n, classes int) ([]float32, []int) {
	x := randomInputs(rng, size, n)
	return x, randomLabels(rng, n, classes)
}

// randomInputs returns n examples of size standard normal floats.
func randomInputs(rng *rand.Rand, size, n int) []float32 {
	x := make([]float32, n*size)
	for k := range x {
		x[k] = float32(rng.NormFloat64())
	}
	return x
}

// randomLabels returns n labels among classes.
func randomLabels(rng *rand.Rand, n, classes int) []int {
	y := make([]int, n)
	for k := range y {
		y[k] = rng.IntN(classes)
	}
	return y
}

// privateSteps checks that plans p and ref give the same losses,
// per-example norms and clipped sums in private steps (whole and in
// StepAdd pieces) and the same per-example gradients (Gradients) on
// the batch x, y, bit for bit: sameSteps without its non-private steps.
func privateSteps(t *testing.T, p, ref *Plan, x []float32, y []int, size int) {
	t.Helper()
	n := len(y)
	var sums, gots [2][]float32
	var sqs [2][][]float64
	var losses [2][]float64
	for k, q := range []*Plan{p, ref} {
		cl := &testClipper{sq: make([][]float64, n)}
		sums[k] = make([]float32, size)
		loss, err := q.Step(x, y, sums[k], cl)
		if err != nil {
			t.Fatal(err)
		}
		losses[k], sqs[k] = append([]float64(nil), loss...), cl.sq
		sz := len(x) / n
		q.BeginAdd()
		for i0 := 0; i0 < n; i0 += 2 * q.Granule() {
			i1 := min(n, i0+2*q.Granule())
			if _, err := q.StepAdd(context.Background(), x[i0*sz:i1*sz], y[i0:i1], &testClipper{}); err != nil {
				t.Fatal(err)
			}
		}
		gots[k] = make([]float32, size)
		if err := q.SumInto(gots[k]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		sameLoss(t, i, losses[0][i], losses[1][i])
		sameBits64(t, fmt.Sprintf("example %d norms", i), sqs[0][i], sqs[1][i])
	}
	sameBits(t, "sum", sums[0], sums[1])
	sameBits(t, "StepAdd sum", gots[0], gots[1])
	if size*n > 1<<24 {
		return // (WideResNet's gradients: 11 MB an example)
	}
	gp, lp := gradientsOf(t, p, x, y, size)
	gr, lr := gradientsOf(t, ref, x, y, size)
	for i := range n {
		sameBits(t, fmt.Sprintf("example %d gradient", i), gp[i], gr[i])
		sameLoss(t, i, lp[i], lr[i])
	}
}

// workerArenas returns p's workers' arenas.
func workerArenas(p *Plan) []*arena {
	var out []*arena
	for _, w := range p.workers {
		out = append(out, w.mem)
	}
	return out
}

// huge returns the bytes of a's carved pages on transparent huge pages,
// or -1 (anonHuge).
func (a *arena) huge() int {
	if a == nil || a.off == 0 {
		return 0
	}
	lo := uintptr(unsafe.Pointer(&a.buf[a.base]))
	return anonHuge(lo, lo+4*uintptr(a.off)/4096*4096)
}

// planHuge returns the MiB of p's arenas on huge pages (-1: unknown).
func planHuge(p *Plan) float64 {
	t := 0
	for _, m := range append(workerArenas(p), p.mem) {
		h := m.huge()
		if h < 0 {
			return -1
		}
		t += h
	}
	return float64(t) / (1 << 20)
}

// anonHuge returns the bytes of [lo, hi) (page-aligned) on transparent
// huge pages, from /proc/self/pagemap and /proc/kpageflags, or -1 if
// they cannot be read (they need privileges).
func anonHuge(lo, hi uintptr) int {
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return -1
	}
	defer pm.Close()
	kf, err := os.Open("/proc/kpageflags")
	if err != nil {
		return -1
	}
	defer kf.Close()
	const page, thp = 4096, 1 << 22 // KPF_THP
	n := int((hi - lo) / page)
	ents := make([]byte, 8*n)
	if _, err := pm.ReadAt(ents, int64(lo/page*8)); err != nil {
		return -1
	}
	total := 0
	var fl [8]byte
	for k := range n {
		e := binary.LittleEndian.Uint64(ents[8*k:])
		pfn := e & (1<<55 - 1)
		if e>>63 == 0 || pfn == 0 {
			continue
		}
		if _, err := kf.ReadAt(fl[:], int64(pfn*8)); err != nil {
			return -1
		}
		if binary.LittleEndian.Uint64(fl[:])&thp != 0 {
			total += page
		}
	}
	return total
}

// TestArenaHugePages reports how much of each arena of a plan is on
// huge pages after a step, and fails if none of the default plan's is
// where Linux has transparent huge pages on "madvise" or "always" and the
// process may read its page flags (a machine short of free huge pages
// may give fewer than asked, but not none).
func TestArenaHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		t.Skip("no transparent huge pages")
	}
	on := strings.Contains(string(mode), "[madvise]") || strings.Contains(string(mode), "[always]")
	b := cifarCNN()
	rng := rand.New(rand.NewPCG(1, 2))
	params := randParams(rng, b.n)
	x, y := b.batch(rng, 64, 10)
	var plans []*Plan // kept, but for one dropped before the plan without huge pages
	defer func() { runtime.KeepAlive(plans) }()
	for _, noHuge := range []bool{false, true} {
		if noHuge {
			// A freed arena's address ranges keep their advice when the
			// heap reuses them: the plan without huge pages must not
			// inherit them.
			q, err := NewPlan(b.net, params, Options{MaxBatch: 64, Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			q.Step(x, y, make([]float32, b.n), &testClipper{})
			q = nil
			runtime.GC()
			runtime.GC()
		}
		p, err := NewPlan(b.net, params, Options{MaxBatch: 64, Workers: 2, noHugePages: noHuge})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
		sum := make([]float32, b.n)
		if _, err := p.Step(x, y, sum, &testClipper{}); err != nil {
			t.Fatal(err)
		}
		total := 0
		for k, m := range append(workerArenas(p), p.mem) {
			h := m.huge()
			t.Logf("noHugePages %v: arena %d: %.1f MiB carved, %.1f MiB of it on huge pages (THP %s)",
				noHuge, k, float64(4*m.off)/(1<<20), float64(h)/(1<<20), strings.TrimSpace(string(mode)))
			if h < 0 {
				t.Skip("page flags not readable")
			}
			total += h
		}
		if on && !noHuge && total == 0 {
			t.Errorf("no huge page in the arenas")
		}
		if noHuge && total != 0 {
			t.Errorf("noHugePages: %.1f MiB of the arenas on huge pages", float64(total)/(1<<20))
		}
	}
}
