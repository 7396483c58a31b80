package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stateEntry is one value of the state bucket and its revision.
type stateEntry struct {
	value []byte
	rev   uint64
}

// stateGet reads key of the state bucket from the leader of the bucket's
// stream, so that the read sees every write acknowledged before it.
//
// jetstream.KeyValue.Get does not: a bucket allows direct gets, which any
// replica answers, and a replica catching up (a restarted node) answers
// with an old value or none. A front-end then served an older head than a
// client had already been given, and a release it had already returned
// as not found; an aggregator settling a failed write took a record
// written for a missing one. nats.go has no option for a leader read, so
// this sends the JetStream API's message get (answered by the stream
// leader only) itself.
func (r *Node) stateGet(ctx context.Context, key string) (stateEntry, error) {
	bucket := r.cfg.Service + "_state"
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{"$KV." + bucket + "." + key})
	if err != nil {
		return stateEntry{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		// A request sent while the stream elects a leader gets no reply:
		// bound it as jetstream bounds its own requests.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	m, err := r.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return stateEntry{}, fmt.Errorf("reading %s from the leader: %w", key, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return stateEntry{}, fmt.Errorf("reading %s from the leader: %w", key, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return stateEntry{}, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return stateEntry{}, fmt.Errorf("reading %s from the leader: %w", key, resp.Error)
	case resp.Message == nil:
		return stateEntry{}, fmt.Errorf("reading %s from the leader: %w", key, jetstream.ErrInvalidJetStreamResponse)
	}
	if len(resp.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
		if err != nil {
			return stateEntry{}, fmt.Errorf("reading %s from the leader: %w", key, err)
		}
		if h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
			return stateEntry{}, jetstream.ErrKeyNotFound // deleted or purged
		}
	}
	return stateEntry{value: resp.Message.Data, rev: resp.Message.Seq}, nil
}
