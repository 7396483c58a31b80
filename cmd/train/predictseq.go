package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/seqtrain"
	"github.com/dpmf-go/dpmf/text"
)

// sequenceModel is what train predict and eval need of a model over
// token ids.
type sequenceModel = seqtrain.Forwarder

// sequenceModelOf returns the sequence model a model file holds; ok is
// false for the other models.
func sequenceModelOf(tr *models.Trained) (m sequenceModel, ok bool, err error) {
	return seqtrain.NewForwarder(tr.Model)
}

// loadTokenizer reads -tokenizer: "bytes" or a directory holding GPT-2's
// vocab.json and merges.txt, or tokenizer.json ("" for none).
func loadTokenizer(spec string) (text.Tokenizer, error) {
	switch spec {
	case "":
		return nil, nil
	case "bytes":
		return text.Bytes{}, nil
	}
	t, err := text.LoadBPE(spec)
	if err != nil {
		return nil, inputError{fmt.Errorf("-tokenizer: %w", err)}
	}
	return t, nil
}

// maxSequenceLine bounds one input line of sequence prediction.
const maxSequenceLine = 16 << 20

// seqPredictor reads JSON lines of tokens or text and writes one JSON line
// of predictions per input.
type seqPredictor struct {
	ctx   context.Context
	m     sequenceModel
	tok   text.Tokenizer // nil: inputs must be token ids
	top   int            // 0: every id's log-probability
	out   *bufio.Writer
	batch int

	x    []float32
	last []int // last real position of each input of the batch
	logp []float64
	b    []byte
}

// predictSequences writes, for each input line {"tokens": [ids...]} or
// {"text": "..."}, the next-token log-probabilities at its last position
// ({"logprobs": [...]} indexed by id, or with -top K {"top": [{"id", "logprob",
// "token"}...]} most likely first, "token" when a tokenizer is known), or
// for a classifier {"class": K, "probabilities": [...]}. An input longer
// than the model's context keeps its last Context tokens for next-token
// prediction and its first for classification, as training packed them.
func predictSequences(ctx context.Context, m sequenceModel, tok text.Tokenizer, top int, in io.Reader, name string, stdout io.Writer) error {
	c, v, k := m.Context(), m.Vocab(), m.Classes()
	if c < 1 || v < 1 || k < 0 {
		return fmt.Errorf("predict: model of context %d, vocabulary %d and %d classes", c, v, k)
	}
	if tok != nil && tok.VocabSize() > v {
		return usagef("-tokenizer has %d ids, the model %d", tok.VocabSize(), v)
	}
	if top < 0 {
		return usagef("-top %d must not be negative", top)
	}
	if k > 0 && top > 0 {
		return usagef("-top applies to next-token models; this one is a classifier of %d classes", k)
	}
	p := &seqPredictor{ctx: ctx, m: m, tok: tok, top: min(top, v), out: bufio.NewWriter(stdout),
		batch: max(1, min(predictBatch, seqtrain.MaxOutputs/seqtrain.Outputs(m)))}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<16), maxSequenceLine)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\ufeff"))
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if err := p.parse(b); err != nil {
			return usagef("predict: %s line %d: %v", name, line, err)
		}
		if len(p.last) == p.batch {
			if err := p.flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return usagef("predict: %s line %d is longer than %d MiB", name, line+1, maxSequenceLine>>20)
		}
		return fmt.Errorf("predict: reading %s: %w", name, err)
	}
	if err := p.flush(); err != nil {
		return err
	}
	return p.out.Flush()
}

type seqInput struct {
	Tokens []json.Number `json:"tokens"`
	Text   *string       `json:"text"`
}

func (p *seqPredictor) parse(b []byte) error {
	var in seqInput
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf(`want {"tokens": [ids...]} or {"text": "..."}: %v`, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New(`want {"tokens": [ids...]} or {"text": "..."} alone on the line, found more after it`)
	}
	var ids []int
	switch {
	case in.Tokens != nil && in.Text != nil:
		return errors.New(`give "tokens" or "text", not both`)
	case in.Text != nil:
		if p.tok == nil {
			return errors.New(`a "text" input needs -tokenizer (a GPT-2 directory or bytes)`)
		}
		ids = p.tok.Encode(*in.Text)
	case in.Tokens != nil:
		ids = make([]int, len(in.Tokens))
		for i, n := range in.Tokens {
			id, err := strconv.Atoi(n.String())
			if err != nil || id < 0 || id >= p.m.Vocab() {
				return fmt.Errorf("token %d is %s, want an integer id in [0, %d)", i, n, p.m.Vocab())
			}
			ids[i] = id
		}
	default:
		return errors.New(`want {"tokens": [ids...]} or {"text": "..."}`)
	}
	if len(ids) == 0 {
		return errors.New("no tokens")
	}
	c := p.m.Context()
	if len(ids) > c {
		if p.m.Classes() == 0 {
			ids = ids[len(ids)-c:]
		} else {
			ids = ids[:c]
		}
	}
	for i := range c {
		if i < len(ids) {
			p.x = append(p.x, float32(ids[i]))
		} else {
			p.x = append(p.x, data.TextPad)
		}
	}
	p.last = append(p.last, len(ids)-1)
	return nil
}

func (p *seqPredictor) flush() error {
	n := len(p.last)
	if n == 0 {
		return nil
	}
	if err := p.ctx.Err(); err != nil {
		return err
	}
	v, k := p.m.Vocab(), p.m.Classes()
	per := seqtrain.Outputs(p.m)
	lf, lastOnly := p.m.(seqtrain.LastLogitser)
	if lastOnly && k == 0 {
		per = v // one row of next-token logits an input
	}
	out := make([]float32, n*per)
	var err error
	if lastOnly {
		err = lf.LastLogits(p.x, out)
	} else {
		err = p.m.Forward(p.x, out)
	}
	if err != nil {
		return fmt.Errorf("predict: %w", err)
	}
	for i, last := range p.last {
		var row []float32
		if k == 0 && !lastOnly {
			row = out[i*per+last*v : i*per+(last+1)*v]
		} else {
			row = out[i*per : (i+1)*per]
		}
		p.logp = slices.Grow(p.logp[:0], len(row))[:len(row)]
		if err := text.LogSoftmax(p.logp, row); err != nil {
			return fmt.Errorf("predict: model output: %w", err)
		}
		if err := p.write(); err != nil {
			return err
		}
	}
	p.x, p.last = p.x[:0], p.last[:0]
	return nil
}

// write writes the line of one input from its log-probabilities p.logp.
func (p *seqPredictor) write() error {
	b := p.b[:0]
	switch {
	case p.m.Classes() > 0:
		best := 0
		for j, l := range p.logp {
			if l > p.logp[best] {
				best = j
			}
		}
		b = append(b, `{"class":`...)
		b = strconv.AppendInt(b, int64(best), 10)
		b = append(b, `,"probabilities":[`...)
		for j, l := range p.logp {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendFloat32(b, math.Exp(l))
		}
		b = append(b, "]}"...)
	case p.top == 0:
		b = append(b, `{"logprobs":[`...)
		for j, l := range p.logp {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendFloat32(b, l)
		}
		b = append(b, "]}"...)
	default:
		ids := topIDs(p.logp, p.top)
		b = append(b, `{"top":[`...)
		for j, id := range ids {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = strconv.AppendInt(b, int64(id), 10)
			b = append(b, `,"logprob":`...)
			b = appendFloat32(b, p.logp[id])
			if p.tok != nil {
				if s, err := p.tok.Decode([]int{id}); err == nil {
					q, _ := json.Marshal(s)
					b = append(b, `,"token":`...)
					b = append(b, q...)
				}
			}
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	b = append(b, '\n')
	p.b = b
	_, err := p.out.Write(b)
	return err
}

// topIDs returns the k ids of largest log-probability, largest first (the
// smaller id first among equals).
func topIDs(logp []float64, k int) []int {
	ids := make([]int, len(logp))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int {
		switch {
		case logp[a] > logp[b]:
			return -1
		case logp[a] < logp[b]:
			return 1
		}
		return 0
	})
	return ids[:k]
}

// appendFloat32 appends v rounded to float32, in the shortest form that
// reads back as that float32.
func appendFloat32(b []byte, v float64) []byte {
	return strconv.AppendFloat(b, float64(float32(v)), 'g', -1, 32)
}
