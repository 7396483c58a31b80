package text

// Bytes is the byte-level tokenizer for models trained from scratch: token
// i < 256 is the byte i, and 256 is the end of text. Its vocabulary has
// 257 ids.
type Bytes struct{}

// BytesEOS is the end-of-text id of Bytes.
const BytesEOS = 256

// Encode returns the bytes of s as ids.
func (Bytes) Encode(s string) []int {
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int(s[i])
	}
	return ids
}

// Decode returns the bytes of ids as a string; the end-of-text id decodes
// to nothing.
func (Bytes) Decode(ids []int) (string, error) {
	b := make([]byte, 0, len(ids))
	for i, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b = append(b, byte(id))
		case id == BytesEOS:
		default:
			return "", invalidf("decode: id %d (position %d) outside the byte vocabulary [0, 257)", id, i)
		}
	}
	return string(b), nil
}

// VocabSize is 257.
func (Bytes) VocabSize() int { return 257 }

// EOS is BytesEOS.
func (Bytes) EOS() (int, bool) { return BytesEOS, true }
