package distributed

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds both decoders arbitrary messages: no panic, no
// allocation beyond the message's size, and a message that decodes
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(encodeRequest(&request{step: 3, nonce: 7, ids: []int{1, 5, 9}, params: []float32{1, -2, 0.5}}))
	f.Add(encodeReply(&partial{nonce: 7, step: 3, examples: 3, lossSum: 1.5, clippedSum: 2, nonFinite: 1,
		quantiles: [4]float64{1, 2, 3, 4}, sum: []float32{0.25, -1}}))
	f.Add(encodeReply(&partial{nonce: 1, step: 2, refusal: "worker 0/1: no"}))
	f.Add([]byte("DPMQ\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r request
		if decodeRequest(b, &r) == nil {
			if len(r.ids) > len(b)/4 || len(r.params) > len(b)/4 {
				t.Fatalf("decoded %d ids and %d parameters from %d bytes", len(r.ids), len(r.params), len(b))
			}
			if got := encodeRequest(&r); !bytes.Equal(got, b) {
				t.Fatalf("request does not round-trip")
			}
		}
		var p partial
		if decodeReply(b, &p) == nil && p.refusal == "" {
			if len(p.sum) > len(b)/4 {
				t.Fatalf("decoded %d floats from %d bytes", len(p.sum), len(b))
			}
			if got := encodeReply(&p); !bytes.Equal(got, b) {
				t.Fatalf("reply does not round-trip")
			}
		}
	})
}
