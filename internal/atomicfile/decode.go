package atomicfile

import (
	"encoding/binary"

	"github.com/vmihailenco/msgpack/v5"
)

// Unmarshal decodes one MessagePack value from data into v, as
// msgpack.Unmarshal does, after checking that every length the value
// declares (strings, byte strings, extensions, arrays and maps, at any
// depth) fits in the bytes that follow it. A corrupt or hostile file of a
// few bytes can otherwise declare a 4 GiB byte string, which the decoder
// allocates before it finds the input short. With the check, decoding
// allocates in proportion to len(data). Malformed data gives an error
// wrapping ErrCorrupt.
func Unmarshal(data []byte, v any) error {
	if err := checkLengths(data); err != nil {
		return err
	}
	if err := msgpack.Unmarshal(data, v); err != nil {
		return corruptf("%v", err)
	}
	return nil
}

// checkLengths walks the first MessagePack value of data without
// allocating. pending counts the values still to be read; each takes at
// least one byte, so pending may never exceed the bytes left.
func checkLengths(data []byte) error {
	_, err := valueEnd(data)
	return err
}

// valueEnd is checkLengths that also returns where the first value ends.
func valueEnd(data []byte) (int, error) {
	i, pending := 0, 1
	for pending > 0 {
		if i >= len(data) {
			return 0, corruptf("truncated MessagePack (%d values missing)", pending)
		}
		pending--
		at := i
		h, err := readHeader(data, i)
		if err != nil {
			return 0, err
		}
		i = h.next
		if h.skip > len(data)-i {
			return 0, corruptf("a %s at byte %d declares %d bytes, %d remain", h.what, at, h.skip, len(data)-i)
		}
		i += h.skip
		if h.items > len(data)-i-pending {
			return 0, corruptf("a %s at byte %d declares %d values, %d bytes remain", h.what, at, h.items, len(data)-i)
		}
		pending += h.items
	}
	return i, nil
}

// header is the head of one MessagePack value: where its payload starts
// (next), the payload bytes (skip) and the values that follow (items).
type header struct {
	next, skip, items int
	what              string
}

// readHeader reads the head of the value at data[at] (at < len(data)).
func readHeader(data []byte, at int) (header, error) {
	var h header
	c := data[at]
	i := at + 1
	// size reads a big-endian length of w bytes at i.
	size := func(w int) (int, error) {
		if i+w > len(data) {
			return 0, corruptf("truncated MessagePack length at byte %d", at)
		}
		var n uint64
		switch w {
		case 1:
			n = uint64(data[i])
		case 2:
			n = uint64(binary.BigEndian.Uint16(data[i:]))
		case 4:
			n = uint64(binary.BigEndian.Uint32(data[i:]))
		}
		i += w
		return int(n), nil
	}
	var (
		skip  int // payload bytes that follow
		items int // values that follow
		err   error
		what  string
	)
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		// fixint, nil, booleans
	case c <= 0x8f:
		items, what = 2*int(c&0x0f), "map"
	case c <= 0x9f:
		items, what = int(c&0x0f), "array"
	case c <= 0xbf:
		skip, what = int(c&0x1f), "string"
	case c == 0xc1:
		return h, corruptf("invalid MessagePack byte 0xc1 at byte %d", at)
	case c >= 0xc4 && c <= 0xc6:
		skip, err = size(1 << (c - 0xc4))
		what = "byte string"
	case c >= 0xc7 && c <= 0xc9:
		skip, err = size(1 << (c - 0xc7))
		skip++ // the extension type
		what = "extension"
	case c == 0xca:
		skip = 4
	case c == 0xcb:
		skip = 8
	case c >= 0xcc && c <= 0xcf:
		skip = 1 << (c - 0xcc)
	case c >= 0xd0 && c <= 0xd3:
		skip = 1 << (c - 0xd0)
	case c >= 0xd4 && c <= 0xd8:
		skip = 1 + 1<<(c-0xd4)
		what = "extension"
	case c >= 0xd9 && c <= 0xdb:
		skip, err = size(1 << (c - 0xd9))
		what = "string"
	case c == 0xdc || c == 0xdd:
		items, err = size(2 << (c - 0xdc))
		what = "array"
	case c == 0xde || c == 0xdf:
		items, err = size(2 << (c - 0xde))
		items *= 2
		what = "map"
	}
	if err != nil {
		return h, err
	}
	if what == "" {
		what = "number"
	}
	h.next, h.skip, h.items, h.what = i, skip, items, what
	return h, nil
}

// Reason returns the text of an error from Open or Unmarshal without its
// "atomicfile: corrupt or foreign file: " lead, for callers that wrap it in
// a corruption error of their own.
func Reason(err error) string {
	if ce, ok := err.(*CorruptError); ok {
		return ce.detail()
	}
	return err.Error()
}
