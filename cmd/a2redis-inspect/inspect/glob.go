package inspect

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// pushdownGlob returns the part of a SCAN MATCH pattern that stands for the
// session tag's contents when the user's glob is match: the glob itself
// when it is made only of '*' and characters keys.Tag copies unchanged (so
// the server-side match is the same or looser), else "*". The client
// matches every session id against the glob again, so looser is fine.
func pushdownGlob(match string) string {
	if match == "" || !utf8.ValidString(match) {
		return "*"
	}
	for i := 0; i < len(match); i++ {
		c := match[i]
		if c == '*' || c >= utf8.RuneSelf {
			continue
		}
		if c < 0x20 || c == 0x7f || strings.IndexByte(`"\{}?[]`, c) >= 0 {
			return "*"
		}
	}
	return match
}

// checkGlob reports a glob whose character class is never closed.
func checkGlob(p string) error {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '^' {
				j++
			}
			for ; j < len(p) && p[j] != ']'; j++ {
				if p[j] == '\\' {
					j++
				}
			}
			if j >= len(p) {
				return errors.New("unterminated [ class")
			}
			i = j
		}
	}
	return nil
}

// globMatch reports whether s matches the Redis-style glob p, byte by byte
// like SCAN MATCH: '*' any run of bytes, '?' one byte, '[abc]', '[^a]',
// '[a-z]' a byte class, '\x' the byte x.
func globMatch(p, s string) bool {
	// Iterative matching with backtracking to the last '*'.
	pi, si := 0, 0
	starP, starS := -1, 0
	for si < len(s) {
		if pi < len(p) {
			switch p[pi] {
			case '*':
				for pi < len(p) && p[pi] == '*' {
					pi++
				}
				if pi == len(p) {
					return true
				}
				starP, starS = pi, si
				continue
			case '?':
				pi++
				si++
				continue
			case '[':
				if end, ok := matchClass(p, pi, s[si]); ok {
					pi = end
					si++
					continue
				}
			case '\\':
				if pi+1 < len(p) && p[pi+1] == s[si] {
					pi += 2
					si++
					continue
				}
			default:
				if p[pi] == s[si] {
					pi++
					si++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		pi, si = starP, starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchClass matches c against the class opening at p[start] ('['); it
// returns the index after the class and whether c is in it.
func matchClass(p string, start int, c byte) (int, bool) {
	i := start + 1
	negate := false
	if i < len(p) && p[i] == '^' {
		negate = true
		i++
	}
	found := false
	for i < len(p) && p[i] != ']' {
		switch {
		case p[i] == '\\' && i+1 < len(p):
			if p[i+1] == c {
				found = true
			}
			i += 2
		case i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']':
			lo, hi := p[i], p[i+2]
			if lo > hi {
				lo, hi = hi, lo
			}
			if c >= lo && c <= hi {
				found = true
			}
			i += 3
		default:
			if p[i] == c {
				found = true
			}
			i++
		}
	}
	if i >= len(p) {
		return 0, false // unterminated: checkGlob rejects it first
	}
	return i + 1, found != negate
}
