package dialect

import (
	"regexp"
	"strings"
)

// codeCall is one provider call found in an Oddlynew run's JavaScript.
type codeCall struct {
	Tool string // namespace.method, e.g. documents.editDocument
	Args string // the text between the call's parentheses
	Pos  int    // byte offset of the call in the code
}

// providerNamespaces are the Oddlynew namespaces whose calls are audited.
var providerNamespaces = []string{"documents", "organizations", "ids"}

// extractCalls returns the provider calls written in code, in text order.
// It is a scanner, not a JavaScript parser: it finds `ns.method(` outside
// string literals and comments and takes the balanced argument text.
func extractCalls(code string) []codeCall {
	var calls []codeCall
	n := len(code)
	for i := 0; i < n; {
		c := code[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(code, i)
			continue
		case c == '/' && i+1 < n && code[i+1] == '/':
			for i < n && code[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < n && code[i+1] == '*':
			end := strings.Index(code[i+2:], "*/")
			if end < 0 {
				return calls
			}
			i += end + 4
			continue
		}
		if isIdentStart(c) && (i == 0 || !isIdentPart(code[i-1]) && code[i-1] != '.') {
			j := i
			for j < n && isIdentPart(code[j]) {
				j++
			}
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
					calls = append(calls, codeCall{Tool: ns + "." + method, Args: code[p+1 : end], Pos: i})
					i = p + 1
					continue
				}
			}
			i = j
			continue
		}
		i++
	}
	return calls
}

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

// literalRe matches `key: "value"` with the key bare or quoted and the
// value in any JavaScript string quotes (template literals without
// substitutions only).
var literalRe = regexp.MustCompile("[\"']?([A-Za-z_$][A-Za-z0-9_$]*)[\"']?\\s*:\\s*(?:\"((?:[^\"\\\\]|\\\\.)*)\"|'((?:[^'\\\\]|\\\\.)*)'|`([^`$]*)`)")

// literals returns the first string literal given to each key in text.
func literals(text string) map[string]string {
	out := map[string]string{}
	for _, m := range literalRe.FindAllStringSubmatch(text, -1) {
		k := m[1]
		if _, ok := out[k]; ok {
			continue
		}
		out[k] = m[2] + m[3] + m[4]
	}
	return out
}

// writeBasisRe matches a writeBasis property and its value, which is a
// string literal or an expression up to the next comma or brace.
var writeBasisRe = regexp.MustCompile("([\"']?writeBasis[\"']?\\s*:)\\s*(?:\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|[^,}\\n]+)")

// stripWriteBasis removes the values of writeBasis properties: a CAS token
// changes from one attempt to the next but does not change what is intended.
func stripWriteBasis(code string) string {
	return writeBasisRe.ReplaceAllString(code, "$1")
}

// stripKey removes the string value given to key, so that two calls that
// differ only by their idempotency key compare equal.
func stripKey(text, key string) string {
	re := regexp.MustCompile("([\"']?" + regexp.QuoteMeta(key) + "[\"']?\\s*:)\\s*(?:\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`)")
	return re.ReplaceAllString(text, "$1")
}
