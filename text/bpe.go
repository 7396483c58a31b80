package text

import (
	"container/heap"
	"unicode/utf8"
)

// BPE is GPT-2's byte-level byte-pair-encoding tokenizer (Radford et al.
// 2019): text is split by Pretokenize, each piece's UTF-8 bytes are
// written as printable characters (ByteToUnicode), and adjacent symbols
// are merged by the rank of their pair in the merges list, lowest first,
// until no listed pair is left; the merged symbols' vocabulary ids are the
// tokens. It reads the files of a Hugging Face directory (LoadBPE) and is
// safe for concurrent use.
//
// Merging follows the reference implementation when every merge's parts
// were made by earlier merges (as in every trained merges list): the
// lowest-ranked pair present is merged, leftmost occurrence first.
type BPE struct {
	vocab       map[string]int
	raw         map[int32][]byte // id -> the bytes it decodes to
	size        int              // largest id + 1
	byteID      [256]int32
	merges      map[symbolPair]merged
	eos         int // -1: none
	prefixSpace bool
}

type symbolPair struct{ a, b int32 }

type merged struct{ rank, id int32 }

// ByteToUnicode is GPT-2's map from bytes to the characters that stand for
// them in its vocabulary: printable Latin-1 bytes ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves, and the others, in order, for U+0100 on.
func ByteToUnicode() [256]rune {
	var m [256]rune
	n := rune(0)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			m[b] = rune(b)
		} else {
			m[b] = 256 + n
			n++
		}
	}
	return m
}

// VocabSize is one more than the largest id.
func (t *BPE) VocabSize() int { return t.size }

// EOS is the id of "<|endoftext|>", if the vocabulary has it.
func (t *BPE) EOS() (int, bool) { return t.eos, t.eos >= 0 }

// ID returns the id of a token written as in the vocabulary file (bytes as
// ByteToUnicode's characters, so " the" is "Ġthe").
func (t *BPE) ID(token string) (int, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// Encode returns the token ids of s.
func (t *BPE) Encode(s string) []int {
	if t.prefixSpace && s != "" && s[0] != ' ' {
		s = " " + s
	}
	var ids []int
	var w word
	for i := 0; i < len(s); {
		j := pretokenEnd(s, i)
		ids = t.encodePiece(&w, s[i:j], ids)
		i = j
	}
	return ids
}

// Decode returns the text of ids: the bytes their tokens stand for.
func (t *BPE) Decode(ids []int) (string, error) {
	var b []byte
	for i, id := range ids {
		r, ok := t.raw[int32(id)]
		if !ok || id < 0 || id >= t.size {
			return "", invalidf("decode: id %d (position %d) is not in the vocabulary", id, i)
		}
		b = append(b, r...)
	}
	return string(b), nil
}

// word is the merge state of one piece: symbols in a doubly linked list
// over their first positions, and a heap of candidate pairs.
type word struct {
	sym        []int32
	prev, next []int32
	cand       candidates
}

type candidate struct {
	rank, pos, a, b int32
}

// candidates is a min-heap by (rank, position).
type candidates []candidate

func (c candidates) Len() int { return len(c) }
func (c candidates) Less(i, j int) bool {
	return c[i].rank < c[j].rank || c[i].rank == c[j].rank && c[i].pos < c[j].pos
}
func (c candidates) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *candidates) Push(x any)   { *c = append(*c, x.(candidate)) }
func (c *candidates) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

func (t *BPE) push(w *word, p int32) {
	q := w.next[p]
	if p < 0 || q < 0 {
		return
	}
	a, b := w.sym[p], w.sym[q]
	if m, ok := t.merges[symbolPair{a, b}]; ok {
		heap.Push(&w.cand, candidate{rank: m.rank, pos: p, a: a, b: b})
	}
}

// encodePiece appends the tokens of one pre-tokenized piece to ids.
func (t *BPE) encodePiece(w *word, piece string, ids []int) []int {
	n := len(piece)
	if n == 1 {
		return append(ids, int(t.byteID[piece[0]]))
	}
	w.sym, w.prev, w.next, w.cand = w.sym[:0], w.prev[:0], w.next[:0], w.cand[:0]
	for i := 0; i < n; i++ {
		w.sym = append(w.sym, t.byteID[piece[i]])
		w.prev = append(w.prev, int32(i-1))
		w.next = append(w.next, int32(i+1))
	}
	w.next[n-1] = -1
	for i := int32(0); i < int32(n-1); i++ {
		t.push(w, i)
	}
	for w.cand.Len() > 0 {
		c := heap.Pop(&w.cand).(candidate)
		p := c.pos
		q := w.next[p]
		// Stale: p was merged into its left neighbour (sym -1), or a
		// symbol of the pair changed since it was pushed.
		if w.sym[p] != c.a || q < 0 || w.sym[q] != c.b {
			continue
		}
		w.sym[p] = t.merges[symbolPair{c.a, c.b}].id
		w.sym[q] = -1
		w.next[p] = w.next[q]
		if r := w.next[q]; r >= 0 {
			w.prev[r] = p
		}
		if l := w.prev[p]; l >= 0 {
			t.push(w, l)
		}
		t.push(w, p)
	}
	for p := int32(0); p >= 0; p = w.next[p] {
		ids = append(ids, int(w.sym[p]))
	}
	return ids
}

// unicodeToByte inverts ByteToUnicode.
func unicodeToByte() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b, r := range ByteToUnicode() {
		m[r] = byte(b)
	}
	return m
}

// rawBytes returns the bytes a vocabulary token stands for: each character
// through the inverse of ByteToUnicode, or its own UTF-8 bytes when it
// stands for no byte (as in added tokens).
func rawBytes(tok string, inv map[rune]byte) []byte {
	b := make([]byte, 0, len(tok))
	for _, r := range tok {
		if c, ok := inv[r]; ok {
			b = append(b, c)
		} else {
			b = utf8.AppendRune(b, r)
		}
	}
	return b
}
