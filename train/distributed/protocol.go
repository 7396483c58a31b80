package distributed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The wire format: little-endian, floats as their IEEE bits, so a sum
// arrives bit for bit.
//
//	request: "DPMQ" v1 | digest [32] | step u32 | nonce u64 | n u32 | ids [n]u32 | d u32 | params [d]f32
//	reply:   "DPMR" v1 | nonce u64 | step u32 | status u8 | status 0: n u32 | loss·k f64 | clipped·k f64 |
//	         nonfinite u32 | quantiles [4]f64 | d u32 | sum [d]f32; status 1 (the run differs from the
//	         worker's: a usage error) or 2 (the computation failed): the worker's error text
//	heartbeat: "DPMH" v1 | nonce u64 (to the request's reply subject while the worker computes)
const (
	requestMagic   = "DPMQ"
	replyMagic     = "DPMR"
	heartbeatMagic = "DPMH"
	wireVersion    = 1
)

type request struct {
	digest [32]byte
	step   int
	nonce  uint64
	ids    []int
	params []float32
}

// partial is one worker's share of a step: the sums the trainer would
// have accumulated over the same examples.
type partial struct {
	nonce      uint64
	step       int
	examples   int
	lossSum    float64 // sum over chunks of mean loss times chunk size
	clippedSum float64 // sum over chunks of clipped fraction times chunk size
	nonFinite  int
	quantiles  [4]float64
	sum        []float32
	refusal    string // the worker's error, status 1 or 2
	mismatch   bool   // status 1: the coordinator's run is not the worker's
}

var errWire = errors.New("malformed message")

func appendFloats(b []byte, v []float32) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func encodeRequest(r *request) []byte {
	b := make([]byte, 0, 64+4*len(r.ids)+4*len(r.params))
	b = append(b, requestMagic...)
	b = append(b, wireVersion)
	b = append(b, r.digest[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.step))
	b = binary.LittleEndian.AppendUint64(b, r.nonce)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.ids)))
	for _, i := range r.ids {
		b = binary.LittleEndian.AppendUint32(b, uint32(i))
	}
	return appendFloats(b, r.params)
}

// reader consumes a message, remembering the first shortfall.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *reader) f64() float64 { return math.Float64frombits(r.u64()) }

func (r *reader) floats(dst []float32) []float32 {
	n := int(r.u32())
	if n > len(r.b)/4 {
		r.bad = true
		return nil
	}
	dst = append(dst[:0], make([]float32, n)...)
	for i := range dst {
		dst[i] = math.Float32frombits(r.u32())
	}
	return dst
}

func (r *reader) header(magic string) {
	if string(r.take(4)) != magic || r.bad {
		r.bad = true
		return
	}
	if v := r.take(1); v == nil || v[0] != wireVersion {
		r.bad = true
	}
}

func decodeRequest(b []byte, into *request) error {
	r := reader{b: b}
	r.header(requestMagic)
	copy(into.digest[:], r.take(32))
	into.step = int(r.u32())
	into.nonce = r.u64()
	n := int(r.u32())
	if n > len(r.b)/4 {
		return fmt.Errorf("request: %w", errWire)
	}
	into.ids = into.ids[:0]
	for range n {
		into.ids = append(into.ids, int(r.u32()))
	}
	into.params = r.floats(into.params)
	if r.bad || len(r.b) != 0 {
		return fmt.Errorf("request: %w", errWire)
	}
	return nil
}

func encodeReply(p *partial) []byte {
	b := make([]byte, 0, 96+4*len(p.sum))
	b = append(b, replyMagic...)
	b = append(b, wireVersion)
	b = binary.LittleEndian.AppendUint64(b, p.nonce)
	b = binary.LittleEndian.AppendUint32(b, uint32(p.step))
	if p.refusal != "" {
		if p.mismatch {
			b = append(b, 1)
		} else {
			b = append(b, 2)
		}
		return append(b, p.refusal...)
	}
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(p.examples))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.lossSum))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.clippedSum))
	b = binary.LittleEndian.AppendUint32(b, uint32(p.nonFinite))
	for _, q := range p.quantiles {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(q))
	}
	return appendFloats(b, p.sum)
}

func decodeReply(b []byte, into *partial) error {
	r := reader{b: b}
	r.header(replyMagic)
	into.nonce = r.u64()
	into.step = int(r.u32())
	status := r.take(1)
	if r.bad {
		return fmt.Errorf("reply: %w", errWire)
	}
	if status[0] == 1 || status[0] == 2 {
		into.mismatch = status[0] == 1
		into.refusal = string(r.b)
		if into.refusal == "" {
			into.refusal = "refused"
		}
		return nil
	}
	into.refusal, into.mismatch = "", false
	into.examples = int(r.u32())
	into.lossSum = r.f64()
	into.clippedSum = r.f64()
	into.nonFinite = int(r.u32())
	for i := range into.quantiles {
		into.quantiles[i] = r.f64()
	}
	into.sum = r.floats(into.sum)
	if r.bad || len(r.b) != 0 || status[0] != 0 {
		return fmt.Errorf("reply: %w", errWire)
	}
	return nil
}

// requestNonce reads a request's nonce without decoding the rest.
func requestNonce(b []byte) (uint64, bool) {
	const at = 4 + 1 + 32 + 4
	if len(b) < at+8 || string(b[:4]) != requestMagic {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[at:]), true
}

func encodeHeartbeat(nonce uint64) []byte {
	b := append([]byte(heartbeatMagic), wireVersion)
	return binary.LittleEndian.AppendUint64(b, nonce)
}

func isHeartbeat(b []byte, nonce uint64) bool {
	return len(b) == 13 && string(b[:4]) == heartbeatMagic && b[4] == wireVersion && binary.LittleEndian.Uint64(b[5:]) == nonce
}
