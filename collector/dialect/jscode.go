package dialect

import (
	"strings"
)

// codeCall is one provider call found in an Oddlynew run's JavaScript.
type codeCall struct {
	Tool string // namespace.method, e.g. documents.editDocument
	Args string // the text between the call's parentheses
	Pos  int    // byte offset of the call in the code
	lits []literal
	read bool // lits holds the literals of Args
}

// literal is one `key: "value"` pair of a call's arguments.
type literal struct{ key, val string }

// literal returns the first string literal given to key in the call's
// arguments, or "". Calls have a handful of literals: a list searched
// from the start costs less than a map.
func (c *codeCall) literal(key string) string {
	if !c.read {
		c.lits, c.read = appendLiterals(c.lits[:0], c.Args), true
	}
	for _, l := range c.lits {
		if l.key == key {
			return l.val
		}
	}
	return ""
}

// providerNamespaces are the Oddlynew namespaces whose calls are audited.
var providerNamespaces = []string{"documents", "organizations", "ids"}

// extractCalls returns the provider calls written in code, in text order.
// It is a scanner, not a JavaScript parser: it finds `ns.method(` outside
// string literals and comments and takes the balanced argument text.
func extractCalls(code string) []codeCall { return appendCalls(nil, code) }

// appendCalls appends the provider calls written in code to calls.
func appendCalls(calls []codeCall, code string) []codeCall {
	n := len(code)
	for i := 0; i < n; {
		// Skip what can start nothing: most of the code.
		for i < n && jsClass[code[i]] == jsOther {
			i++
		}
		if i == n {
			break
		}
		switch c := code[i]; jsClass[c] {
		case jsQuote:
			i = skipString(code, i)
			continue
		case jsSlash:
			switch {
			case i+1 < n && code[i+1] == '/':
				for i < n && code[i] != '\n' {
					i++
				}
			case i+1 < n && code[i+1] == '*':
				end := strings.Index(code[i+2:], "*/")
				if end < 0 {
					return calls
				}
				i += end + 4
			default:
				i++
			}
			continue
		}
		// An identifier, read whole.
		j := i
		for j < n && isIdentPart(code[j]) {
			j++
		}
		if isIdentStart(code[i]) && (i == 0 || code[i-1] != '.') {
			ns := code[i:j]
			if isProvider(ns) && j < n && code[j] == '.' {
				k := j + 1
				for k < n && isIdentPart(code[k]) {
					k++
				}
				method := code[j+1 : k]
				p := k
				for p < n && (code[p] == ' ' || code[p] == '\t' || code[p] == '\n' || code[p] == '\r') {
					p++
				}
				if method != "" && p < n && code[p] == '(' {
					end := matchParen(code, p)
					// code[i:k] is ns + "." + method, without the copy. The
					// literals' storage of a reused element is kept.
					var lits []literal
					if len(calls) < cap(calls) {
						lits = calls[: len(calls)+1 : len(calls)+1][len(calls)].lits[:0]
					}
					calls = append(calls, codeCall{Tool: code[i:k], Args: code[p+1 : end], Pos: i, lits: lits})
					i = p + 1
					continue
				}
			}
		}
		i = j
	}
	return calls
}

// Byte classes of the code scan.
const (
	jsOther = iota
	jsQuote
	jsSlash
	jsIdent
)

var jsClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c == '"' || c == '\'' || c == '`':
			t[c] = jsQuote
		case c == '/':
			t[c] = jsSlash
		case isIdentPart(byte(c)):
			t[c] = jsIdent
		}
	}
	return t
}()

func isProvider(ns string) bool {
	for _, p := range providerNamespaces {
		if ns == p {
			return true
		}
	}
	return false
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentPart(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) int {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j + 1
		}
	}
	return len(s)
}

// matchParen returns the index of the parenthesis closing the one at open,
// or len(s) when the code is cut off.
func matchParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); {
		switch s[i] {
		case '"', '\'', '`':
			i = skipString(s, i)
			continue
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return len(s)
}

// appendLiterals appends the first string literal given to each key in
// text: `key: "value"`, with the key bare or quoted and the value in any
// JavaScript string quotes (template literals without substitutions only).
// Values keep their escapes as written.
func appendLiterals(out []literal, text string) []literal {
	first := len(out)
	n := len(text)
	for i := 0; i < n; {
		c := text[i]
		var key string
		j := -1
		switch {
		case c == '"' || c == '\'':
			end := skipString(text, i)
			if k := skipSpace(text, end); end <= n && end-i >= 2 && k < n && text[k] == ':' {
				key, j = text[i+1:end-1], k+1
			} else {
				i = end
				continue
			}
		case c == '`':
			i = skipString(text, i)
			continue
		case isIdentStart(c) && (i == 0 || !isIdentPart(text[i-1])):
			e := i
			for e < n && isIdentPart(text[e]) {
				e++
			}
			if k := skipSpace(text, e); k < n && text[k] == ':' {
				key, j = text[i:e], k+1
			} else {
				i = e
				continue
			}
		default:
			i++
			continue
		}
		v := skipSpace(text, j)
		if v < n && (text[v] == '"' || text[v] == '\'' || text[v] == '`') {
			end := skipString(text, v)
			if end <= n && end-v >= 2 && text[end-1] == text[v] {
				val := text[v+1 : end-1]
				seen := false
				for _, l := range out[first:] {
					seen = seen || l.key == key
				}
				if !seen && !(text[v] == '`' && strings.Contains(val, "${")) {
					out = append(out, literal{key, val})
				}
			}
			i = end
			continue
		}
		i = v
	}
	return out
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// stripWriteBasis removes the values of writeBasis properties: a CAS token
// changes from one attempt to the next but does not change what is intended.
// The value is a string literal or an expression up to the next comma,
// brace or line end.
func stripWriteBasis(code string) string {
	return string(appendStripped(nil, code, "writeBasis", true))
}

// stripKey removes the string value given to key, so that two calls that
// differ only by their idempotency key compare equal.
func stripKey(text, key string) string { return string(appendStripped(nil, text, key, false)) }

// appendStripped appends text to dst without the value of any `key:`
// property, keeping "key:". With anyExpr, a value that is not a string
// literal is removed up to the next comma, closing brace or line end;
// otherwise only string literal values are removed.
func appendStripped(dst []byte, text, key string, anyExpr bool) []byte {
	if !strings.Contains(text, key) {
		return append(dst, text...)
	}
	n := len(text)
	last := 0
	for i := 0; i < n; {
		c := text[i]
		end := -1
		switch {
		case c == '"' || c == '\'' || c == '`':
			e := skipString(text, i)
			if e-i-2 == len(key) && text[i+1:e-1] == key && c != '`' {
				end = e
			} else {
				i = e
				continue
			}
		case isIdentStart(c) && (i == 0 || !isIdentPart(text[i-1]) && text[i-1] != '.'):
			e := i
			for e < n && isIdentPart(text[e]) {
				e++
			}
			if text[i:e] == key {
				end = e
			} else {
				i = e
				continue
			}
		default:
			i++
			continue
		}
		k := skipSpace(text, end)
		if k >= n || text[k] != ':' {
			i = end
			continue
		}
		v := skipSpace(text, k+1)
		ve := v
		switch {
		case v < n && (text[v] == '"' || text[v] == '\'' || text[v] == '`'):
			ve = skipString(text, v)
		case anyExpr:
			for ve < n && text[ve] != ',' && text[ve] != '}' && text[ve] != '\n' {
				ve++
			}
		}
		dst = append(dst, text[last:k+1]...)
		last = ve
		i = ve
		if ve == v {
			i = k + 1
		}
	}
	return append(dst, text[last:]...)
}
