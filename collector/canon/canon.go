// Package canon renders JSON values canonically (sorted object keys, no
// insignificant white space) so that two encodings of one value compare
// equal, and hashes them into short intent fingerprints.
package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"

	"github.com/valyala/fastjson"
)

// Append appends the canonical JSON of v to dst. A nil v appends null.
// Object keys are sorted bytewise; a key repeated in one object keeps its
// last value, as most decoders do. Numbers keep their text. Strings are
// re-quoted so that equal strings get equal bytes whatever escaping the
// source used.
func Append(dst []byte, v *fastjson.Value) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		if keysAscending(o) {
			// Most encoders write keys sorted, and then nothing needs
			// sorting nor a list of members.
			dst = append(dst, '{')
			first := true
			o.Visit(func(k []byte, v *fastjson.Value) {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				dst = appendString(dst, k)
				dst = append(dst, ':')
				dst = Append(dst, v)
			})
			return append(dst, '}')
		}
		type kv struct {
			k []byte
			v *fastjson.Value
		}
		kvs := make([]kv, 0, o.Len())
		// Keys stay in the parsed tree until the next parse, as in
		// keysAscending.
		o.Visit(func(k []byte, v *fastjson.Value) {
			kvs = append(kvs, kv{k, v})
		})
		// One sort, stable so that of a key repeated in the object the
		// last member ends its run; then each run is kept as that last
		// member. Sorting first and looking back at a neighbour keeps
		// the cost at n log n in the keys: a linear look for a repeat
		// per key made an object of 100,000 keys cost minutes (adv22).
		slices.SortStableFunc(kvs, func(a, b kv) int {
			return bytes.Compare(a.k, b.k)
		})
		n := 0
		for _, e := range kvs {
			if n > 0 && bytes.Equal(kvs[n-1].k, e.k) {
				kvs[n-1].v = e.v
				continue
			}
			kvs[n] = e
			n++
		}
		kvs = kvs[:n]
		dst = append(dst, '{')
		for i, e := range kvs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, e.k)
			dst = append(dst, ':')
			dst = Append(dst, e.v)
		}
		return append(dst, '}')
	case fastjson.TypeArray:
		a, _ := v.Array()
		dst = append(dst, '[')
		for i, e := range a {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = Append(dst, e)
		}
		return append(dst, ']')
	case fastjson.TypeString:
		s, _ := v.StringBytes()
		return appendString(dst, s)
	default:
		return v.MarshalTo(dst)
	}
}

// keysAscending reports whether the keys of o are in strictly ascending
// bytewise order, which also means that no key repeats.
func keysAscending(o *fastjson.Object) bool {
	ok := true
	var prev []byte
	first := true
	// prev outlives the callback, which fastjson's Visit allows in fact:
	// keys stay in the parsed tree until the next parse.
	o.Visit(func(k []byte, _ *fastjson.Value) {
		if !first && string(prev) >= string(k) {
			ok = false
		}
		prev, first = k, false
	})
	return ok
}

// maxDepth is the deepest nesting Canonical follows.
const maxDepth = 32

// Canonical reports whether raw, JSON text that fastjson accepts, is
// already its own canonical form, so that it can stand for Append of its
// value without a parse: no white space outside strings, object keys in
// strictly ascending order (so none repeats) and without escapes, and
// strings of printable ASCII whose only escapes are those appendString
// writes back alike (\", \\, \b, \f, \n, \r, \t). It may say no to
// canonical text (deep nesting, non-ASCII strings); it never says yes to
// other text.
func Canonical(raw []byte) bool {
	_, ok := canonicalScan(raw, false)
	return ok
}

// CanonicalPrefix reads the object or array that b starts with, in JSON
// text that fastjson accepts (a record whose arguments are b's first
// value), and returns its length when it is its own canonical form, as
// Canonical(b[:n]) would say; ok is false when it is not, or when b does
// not start with '{' or '['. It reads b once, where finding the value's
// end and then calling Canonical read it twice.
func CanonicalPrefix(b []byte) (n int, ok bool) {
	if len(b) == 0 || b[0] != '{' && b[0] != '[' {
		return 0, false
	}
	return canonicalScan(b, true)
}

// canonicalScan is Canonical, which reads all of raw, and with prefix
// CanonicalPrefix, which stops where the first value closes.
func canonicalScan(raw []byte, prefix bool) (int, bool) {
	// prev holds the last key of each open object, nil before the first.
	var prev [maxDepth][]byte
	var inObject [maxDepth]bool
	depth, wantKey := 0, false
	for i := 0; i < len(raw); {
		switch c := raw[i]; c {
		case '{', '[':
			if depth == maxDepth {
				return 0, false
			}
			prev[depth], inObject[depth] = nil, c == '{'
			depth++
			wantKey = c == '{'
			i++
		case '}', ']':
			depth--
			wantKey = false
			i++
			if prefix && depth == 0 {
				return i, true
			}
		case ',':
			wantKey = depth > 0 && inObject[depth-1]
			i++
		case '"':
			j := i + 1
			for j < len(raw) {
				for j < len(raw) && plain[raw[j]] {
					j++
				}
				if j == len(raw) || raw[j] != '\\' || wantKey || j+1 == len(raw) {
					break
				}
				// The escapes that appendString writes back as they are:
				// JSON written by Go or JavaScript escapes quotes and line
				// ends in run code so.
				switch raw[j+1] {
				case '"', '\\', 'b', 'f', 'n', 'r', 't':
					j += 2
				default:
					return 0, false
				}
			}
			if j == len(raw) || raw[j] != '"' {
				return 0, false // another escape, a control byte or non-ASCII
			}
			if wantKey {
				key := raw[i+1 : j]
				if p := prev[depth-1]; p != nil && string(p) >= string(key) {
					return 0, false
				}
				prev[depth-1], wantKey = key, false
			}
			i = j + 1
		case ' ', '\t', '\n', '\r':
			return 0, false
		default:
			// ':' and the text of numbers and literals, which both forms
			// keep as written.
			i++
		}
	}
	if prefix {
		return 0, false // the value does not close
	}
	return len(raw), depth == 0
}

// Bytes parses raw JSON and returns its canonical form. Invalid or empty
// input is returned unchanged, so that it still compares byte for byte.
func Bytes(raw []byte) []byte {
	if len(raw) == 0 {
		return nil
	}
	var p fastjson.Parser
	v, err := p.ParseBytes(raw)
	if err != nil {
		return raw
	}
	return Append(nil, v)
}

// hashBytes is how much of a SHA-256 a fingerprint keeps: 64 bits. Intents
// and bindings are compared within one partition and one correlation
// window, where thousands of them meet, not billions; each is stored with
// every write (in the store and in the detector's memory), so they are
// kept short.
const hashBytes = 8

// Hash returns a short hex fingerprint of the given parts, each length-
// prefixed so that no two part lists share a fingerprint by concatenation.
func Hash(parts ...[]byte) string {
	var out [HashLen]byte
	return string(AppendHash(out[:0], parts...))
}

// HashLen is the length of a fingerprint of Hash.
const HashLen = 2 * hashBytes

// AppendHash appends Hash(parts...) to dst: an operation's fingerprints
// appended to one buffer become one string, one allocation.
func AppendHash(dst []byte, parts ...[]byte) []byte {
	// Fingerprints are taken per call and per operation: short inputs are
	// hashed from a stack buffer in one call, which allocates nothing but
	// the result; long ones stream through a digest.
	var stack [512]byte
	b := stack[:0]
	for _, p := range parts {
		if len(b)+8+len(p) > cap(b) {
			return append(dst, hashStream(parts)...)
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	sum := sha256.Sum256(b)
	return hex.AppendEncode(dst, sum[:hashBytes])
}

func hashStream(parts [][]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:hashBytes])
}

// CollapseSpace replaces every run of white space (outside nothing: the
// input is treated as plain text) by one space and trims both ends. It is
// how Oddlynew run code is compared: formatting must not change an intent.
func CollapseSpace(s string) string {
	return string(AppendCollapsed(make([]byte, 0, len(s)), s))
}

// AppendCollapsed appends CollapseSpace(s) to dst.
func AppendCollapsed[T ~string | ~[]byte](dst []byte, s T) []byte {
	start := len(dst)
	for i := 0; i < len(s); {
		// Copy the run up to the next white space in one append.
		j := i
		for j < len(s) && !isSpace[s[j]] {
			j++
		}
		if j > i {
			if len(dst) > start && i > 0 && isSpace[s[i-1]] {
				dst = append(dst, ' ')
			}
			dst = append(dst, s[i:j]...)
		}
		for j < len(s) && isSpace[s[j]] {
			j++
		}
		i = j
	}
	return dst
}

// isSpace marks the white space CollapseSpace collapses.
var isSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true, '\f': true, '\v': true}

// appendString quotes s as strconv.AppendQuote does, without its cost for
// ASCII strings, which are most strings.
func appendString(dst, s []byte) []byte {
	for _, c := range s {
		if c >= 0x80 {
			return strconv.AppendQuote(dst, string(s))
		}
	}
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		// Copy the run of bytes that need no escape in one append.
		j := i
		for j < len(s) && !needsEscape[s[j]] {
			j++
		}
		dst = append(dst, s[i:j]...)
		if j == len(s) {
			break
		}
		dst = appendEscaped(dst, s[j])
		i = j + 1
	}
	return append(dst, '"')
}

// plain marks the bytes a canonical string holds as they are: printable
// ASCII but the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// needsEscape marks the ASCII bytes that strconv escapes.
var needsEscape = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t[0x7f], t['"'], t['\\'] = true, true, true
	return t
}()

// appendEscaped appends the escape strconv uses for the ASCII byte c: a
// backslash escape where Go has one, else \xNN.
func appendEscaped(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\a':
		return append(dst, '\\', 'a')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	case '\v':
		return append(dst, '\\', 'v')
	}
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'x', hex[c>>4], hex[c&0xf])
}
