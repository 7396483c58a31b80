package text

import (
	"unicode"
	"unicode/utf8"
)

// Pretokenize splits s into the pieces GPT-2's byte-level BPE encodes one
// at a time. It is GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written as a scanner, since Go's regexp has no lookahead: the pieces are
// the matches the pattern finds from left to right, and they concatenate
// to s. \s is unicode.IsSpace, \p{L} unicode.IsLetter and \p{N}
// unicode.IsNumber; a byte that is not valid UTF-8 counts as neither.
func Pretokenize(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := pretokenEnd(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// class of a rune for the pattern: letter, number, space or other.
type runeClass uint8

const (
	classOther runeClass = iota
	classLetter
	classNumber
	classSpace
)

func classOf(r rune, size int) runeClass {
	switch {
	case r == utf8.RuneError && size <= 1:
		return classOther
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// classAt returns the class and size of the rune at s[i:] (i < len(s)).
func classAt(s string, i int) (runeClass, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOf(r, n), n
}

// runEnd returns the end of the run of runes of class c starting at i.
func runEnd(s string, i int, c runeClass) int {
	for i < len(s) {
		ci, n := classAt(s, i)
		if ci != c {
			break
		}
		i += n
	}
	return i
}

// pretokenEnd returns the end of the piece that starts at s[i] (i <
// len(s)), trying the pattern's alternatives in order.
func pretokenEnd(s string, i int) int {
	// 's|'t|'re|'ve|'m|'ll|'d
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then
	// a run of one class (the space alone matches none of them).
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		start = i + 1
	}
	if c, _ := classAt(s, start); c != classSpace {
		return runEnd(s, start, c)
	}
	// \s+(?!\S) then \s+: the whitespace run, less its last rune when a
	// non-space follows and the run has more than one rune.
	j := runEnd(s, i, classSpace)
	if j == len(s) {
		return j
	}
	_, last := utf8.DecodeLastRuneInString(s[i:j])
	if j-last > i {
		return j - last
	}
	return j
}
