// Package redact masks secrets in tool calls before anything is stored or
// logged: the values of secret-looking keys (passwords, tokens, API keys)
// and secret-looking text anywhere (bearer headers, API keys, JWTs, emails,
// card numbers, private keys, URL passwords), in the arguments, the result
// and the error of a call, JSON text inside strings included.
//
// A masked value becomes "[redacted:HHHHHHHHHHHH]", where the hex digits
// are a keyed hash (HMAC-SHA-256) of the value under a secret that never
// leaves the collector: equal values get equal masks and different values
// different ones, so that the dialects' fingerprints (a write's intent, a
// key's binding, a create's identity) tell the same calls apart as before
// and the findings do not change, while nobody without the secret can test
// a guess against a mask. The fields the audit reads (paths, document ids,
// idempotency keys, revisions, hashes, codes) are kept.
//
// A redacted call gets its id and fingerprint again, over its arguments
// with every mask the same constant: they no longer depend on the secret
// values, and every carrier and every collector still agree on them.
package redact

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// Config chooses what is masked.
type Config struct {
	// Off stores arguments and results as they come. Default false: secrets
	// are masked.
	Off bool `yaml:"off"`
	// Keys are regular expressions over object keys (matched case
	// insensitively): the whole value of a matching key is masked, whatever
	// its type. Setting the list replaces the default, which masks
	// passwords, secrets, tokens, API and access keys, private keys,
	// authorization headers, cookies and credentials.
	Keys []string `yaml:"keys"`
	// Values are regular expressions over string values and the text inside
	// them: every match is masked, or only its group named "secret" when the
	// expression has one. Setting the list replaces the default, which masks
	// bearer and basic authorization values, JWTs, API keys of the common
	// providers, password assignments in text, URL passwords, private key
	// blocks and email addresses.
	Values []string `yaml:"values"`
	// Cards masks card numbers: 13 to 19 digits, spaces or dashes between
	// them allowed, that pass the Luhn check. Default true.
	Cards bool `yaml:"cards"`
	// Keep lists the keys (case insensitive) whose values are never masked:
	// the fields the audit reads. Setting the list replaces the default; the
	// target and key arguments of the generic servers' write tools
	// (dialects.writes) are always kept.
	Keep []string `yaml:"keep"`
	// SecretFile holds the key the masks are made with (at least 16
	// bytes). Default <data_dir>/redact.key, created with a random key the
	// first time; analyze without a data directory draws one per run.
	SecretFile string `yaml:"secret_file"`
}

// DefaultKeys mask the whole value of secret-looking keys.
var DefaultKeys = []string{
	`(passwords?|passwd|passphrase|pwd|secrets?|tokens?|api[_-]?keys?|access[_-]?keys?|private[_-]?keys?|authorization|cookies?|credentials?)$`,
	`^(auth|pin|cvv|cvc|ssn)$`,
}

// DefaultValues mask secret-looking text wherever it appears.
var DefaultValues = []string{
	`-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?-----END[A-Z ]*PRIVATE KEY-----`,
	`(?i)\b(?:bearer|basic)\s+(?P<secret>[a-z0-9._~+/=-]{8,})`,
	`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`,
	`\b(?:sk|pk|rk)[-_](?:live|test|proj)[-_][A-Za-z0-9_-]{8,}`,
	`\bsk-[A-Za-z0-9_-]{20,}`,
	`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b`,
	`\bgh[pousr]_[A-Za-z0-9]{30,}`,
	`\bgithub_pat_[A-Za-z0-9_]{30,}`,
	`\bglpat-[A-Za-z0-9_-]{20,}`,
	`\bxox[abposr]-[A-Za-z0-9-]{10,}`,
	`\bAIza[0-9A-Za-z_-]{35}`,
	`(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)\s*[:=]\s*["']?(?P<secret>[^\s"',;}&]+)`,
	`(?i)\b[a-z][a-z0-9+.-]*://[^/\s:@]+:(?P<secret>[^/\s@]+)@`,
	`\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b`,
}

// DefaultKeep are the keys the audit reads.
var DefaultKeep = []string{
	"path", "paths", "documentId", "documentIds", "document_id", "sourceDocumentId", "destinationDocumentId",
	"id", "ids", "request_id", "requestId", "creationId", "copyId", "operationId", "planToken",
	"idempotency_key", "idempotencyKey", "key", "rev", "revision", "base_revision", "baseRevision",
	"expected_hash", "hash", "sha256", "code", "error", "errorCode", "action", "state", "status", "type",
}

// NewDefaultConfig returns the defaults: redaction on with the default
// lists.
func NewDefaultConfig() Config {
	return Config{Keys: DefaultKeys, Values: DefaultValues, Cards: true, Keep: DefaultKeep}
}

// Validate compiles the expressions and names the first bad one of each
// list.
func (c *Config) Validate() error {
	var errs []error
	for i, k := range c.Keys {
		if _, err := regexp.Compile("(?i)" + k); err != nil {
			errs = append(errs, fmt.Errorf("keys[%d]: %w", i, err))
		}
	}
	for i, v := range c.Values {
		if _, err := regexp.Compile(v); err != nil {
			errs = append(errs, fmt.Errorf("values[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Prefix starts every mask.
const Prefix = "[redacted:"

// constantMask is the mask of every value in the form ids are computed
// over.
const constantMask = "[redacted]"

// maxDepth is the deepest nesting followed; a deeper value is masked whole.
const maxDepth = 64

// maxInnerJSON bounds how many levels of JSON text inside strings are
// opened.
const maxInnerJSON = 2

// Redactor masks secrets. It is safe for concurrent use.
type Redactor struct {
	*rules
	secret []byte
	macs   sync.Pool
	// constant is the same redactor without a secret: every mask the same.
	constant *Redactor
}

// rules are the compiled configuration.
type rules struct {
	keys   []pattern
	values []pattern
	cards  bool
	keep   map[string]bool
	// keyHints and valueHints tell which expressions may match a text.
	keyHints, valueHints *hintSet
	keyModes             keyCache
	scratch              sync.Pool // *[]bool, one entry per value expression
}

// pattern is a compiled expression and the literals one of which every
// match holds (lower case), to skip the expression on text without any.
type pattern struct {
	re    *regexp.Regexp
	hints []string // nil: no literal is known, always run
	group int      // the "secret" group, or -1
}

func newPattern(expr string) pattern {
	re := regexp.MustCompile(expr)
	p := pattern{re: re, group: re.SubexpIndex("secret")}
	if t, err := syntax.Parse(expr, syntax.Perl); err == nil {
		p.hints = required(t.Simplify())
	}
	return p
}

// required returns literals one of which every match of t holds, lower
// case; nil when it cannot tell.
func required(t *syntax.Regexp) []string {
	switch t.Op {
	case syntax.OpLiteral:
		if len(t.Rune) == 0 {
			return nil
		}
		return []string{strings.ToLower(string(t.Rune))}
	case syntax.OpCapture, syntax.OpPlus:
		return required(t.Sub[0])
	case syntax.OpRepeat:
		if t.Min > 0 {
			return required(t.Sub[0])
		}
	case syntax.OpConcat:
		// The longest literal of the sequence.
		var best []string
		for _, s := range t.Sub {
			if h := required(s); h != nil && (best == nil || minLen(h) > minLen(best)) {
				best = h
			}
		}
		return best
	case syntax.OpAlternate:
		var all []string
		for _, s := range t.Sub {
			h := required(s)
			if h == nil {
				return nil
			}
			all = append(all, h...)
		}
		return all
	}
	return nil
}

func minLen(h []string) int {
	n := -1
	for _, s := range h {
		if n < 0 || len(s) < n {
			n = len(s)
		}
	}
	return n
}

// New returns a redactor for cfg whose masks are keyed by secret; keep
// adds keys never masked. It returns nil when redaction is off.
func New(cfg Config, secret []byte, keep ...string) (*Redactor, error) {
	if cfg.Off {
		return nil, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot build redaction: %w", err)
	}
	if len(secret) == 0 {
		return nil, errors.New("cannot build redaction: empty secret")
	}
	r := &Redactor{rules: &rules{cards: cfg.Cards, keep: map[string]bool{}}, secret: secret}
	for _, k := range cfg.Keys {
		r.keys = append(r.keys, newPattern("(?i)"+k))
	}
	for _, v := range cfg.Values {
		r.values = append(r.values, newPattern(v))
	}
	for _, k := range append(append([]string(nil), cfg.Keep...), keep...) {
		r.keep[strings.ToLower(k)] = true
	}
	r.keyHints, r.valueHints = newHintSet(r.keys), newHintSet(r.values)
	r.scratch.New = func() any { b := make([]bool, len(r.values)); return &b }
	r.macs.New = func() any { return hmac.New(sha256.New, r.secret) }
	r.constant = &Redactor{rules: r.rules}
	return r, nil
}

// mask returns the mask of a value.
func (r *Redactor) mask(v string) string {
	if r.secret == nil {
		return constantMask
	}
	m := r.macs.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(v))
	var sum [sha256.Size]byte
	out := m.Sum(sum[:0])
	r.macs.Put(m)
	return Prefix + hex.EncodeToString(out[:6]) + "]"
}

// isMask reports whether s is already a mask (redaction is idempotent: a
// call redacted by a relay and again by the collector keeps its masks).
func isMask(s string) bool {
	return s == constantMask || len(s) == len(Prefix)+13 && strings.HasPrefix(s, Prefix) && s[len(s)-1] == ']'
}

// Text masks the secrets in free text; n counts the masks.
func (r *Redactor) Text(s string) (string, int) {
	if r == nil || s == "" {
		return s, 0
	}
	n := 0
	sp := r.scratch.Get().(*[]bool)
	defer r.scratch.Put(sp)
	may := *sp
	if !r.valueHints.scan(s, may) && !r.cards {
		return s, 0
	}
	for i := range r.values {
		p := &r.values[i]
		re, g := p.re, p.group
		if !may[i] || !re.MatchString(s) {
			continue
		}
		var b strings.Builder
		last := 0
		for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
			start, end := m[0], m[1]
			if g >= 0 && m[2*g] >= 0 {
				start, end = m[2*g], m[2*g+1]
			}
			if isMask(s[start:end]) || start < last {
				continue
			}
			b.WriteString(s[last:start])
			b.WriteString(r.mask(s[start:end]))
			last = end
			n++
		}
		if last > 0 {
			b.WriteString(s[last:])
			s = b.String()
		}
	}
	if r.cards {
		var k int
		s, k = r.maskCards(s)
		n += k
	}
	return s, n
}

var cardRE = regexp.MustCompile(`\b\d(?:[ -]?\d){12,18}\b`)

func (r *Redactor) maskCards(s string) (string, int) {
	// Cheap test first: a card number has 13 digits at least.
	digits := 0
	for i := 0; i < len(s) && digits < 13; i++ {
		if s[i] >= '0' && s[i] <= '9' {
			digits++
		}
	}
	if digits < 13 {
		return s, 0
	}
	n := 0
	out := cardRE.ReplaceAllStringFunc(s, func(m string) string {
		if !luhn(m) {
			return m
		}
		n++
		return r.mask(m)
	})
	return out, n
}

// luhn reports whether the digits of s pass the Luhn check.
func luhn(s string) bool {
	sum, double, nd := 0, false, 0
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c < '0' || c > '9' {
			continue
		}
		d := int(c - '0')
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
		nd++
	}
	return nd >= 13 && sum%10 == 0
}

func (r *Redactor) secretKey(k string) bool {
	var buf [8]bool
	may := buf[:0]
	if len(r.keys) <= len(buf) {
		may = buf[:len(r.keys)]
	} else {
		may = make([]bool, len(r.keys))
	}
	if !r.keyHints.scan(k, may) {
		return false
	}
	for i := range r.keys {
		if may[i] && r.keys[i].re.MatchString(k) {
			return true
		}
	}
	return false
}

// keyMode says what the value of a key is: kept, masked or walked. raw is
// the key's JSON text, quotes included.
func (r *Redactor) keyMode(raw []byte) (mode, error) {
	if m, ok := r.keyModes.get(raw); ok {
		return m, nil
	}
	key, err := unquote(raw)
	if err != nil {
		return 0, err
	}
	m := modeNormal
	switch {
	case r.keep[strings.ToLower(key)]:
		m = modeKeep
	case r.secretKey(key):
		m = modeMask
	}
	r.keyModes.put(raw, m)
	return m, nil
}

// JSON masks the secrets in a JSON document; n counts the masks. The
// document comes back unchanged (the same slice) when nothing is masked.
// Text that is not JSON is masked whole.
func (r *Redactor) JSON(b []byte) ([]byte, int) {
	if r == nil || len(b) == 0 {
		return b, 0
	}
	w := walker{r: r}
	end, err := w.value(b, skipSpace(b, 0), modeNormal, 0, 0)
	if err == nil && skipSpace(b, end) != len(b) {
		err = errSyntax
	}
	if err != nil {
		return quote(nil, r.mask(string(b))), 1
	}
	if w.n == 0 {
		return b, 0
	}
	w.out = append(w.out, b[w.copied:]...)
	return w.out, w.n
}

// Call masks the secrets of a call in place: its arguments, result, error
// and transport error. It returns how many values were masked; when any
// was, the call's id and fingerprint are taken again over the arguments
// with constant masks.
func (r *Redactor) Call(c *audit.Call) int {
	if r == nil {
		return 0
	}
	args, na := r.JSON(c.Arguments)
	res, nr := r.JSON(c.Result)
	n := na + nr
	if c.Error != nil {
		msg, nm := r.Text(c.Error.Message)
		data, nd := r.JSON(c.Error.Data)
		if nm+nd > 0 {
			e := *c.Error
			e.Message, e.Data = msg, data
			c.Error = &e
			n += nm + nd
		}
	}
	te, nt := r.Text(c.TransportError)
	n += nt
	// Arguments a relay masked already (proxy or wrap with --collector,
	// under the relay's key) carry keyed masks: the id is taken over
	// constant masks too, so that it does not depend on that key either.
	relayed := na == 0 && bytes.Contains(c.Arguments, []byte(Prefix))
	if n == 0 && !relayed {
		return 0
	}
	c.Result, c.TransportError = res, te
	if na > 0 || relayed {
		stable, _ := r.constant.JSON(c.Arguments)
		stable = keyedMask.ReplaceAll(stable, []byte(constantMask))
		canonical := canon.Bytes(stable)
		rpc := audit.IdentityRPC(c.RPCID, c.TraceID, c.SpanID)
		c.ID = audit.StableID(c.Server, c.Session, rpc, c.Time, c.Tool, canonical)
		c.Fingerprint = audit.Fingerprint(c.Server, c.Session, rpc, c.Tool, canonical)
		c.Arguments = args
	}
	return n
}

var errSyntax = errors.New("not JSON")

// keyedMask matches a mask made under a key (mask), as JSON text holds it.
var keyedMask = regexp.MustCompile(`\[redacted:[0-9a-f]{12}\]`)

type mode uint8

const (
	modeNormal mode = iota
	modeKeep        // a kept key's value: strings stay as they are
	modeMask        // a secret key's value: masked whole
)

// walker copies a JSON document, masking as it goes. Unchanged spans are
// copied lazily: out holds b[:copied] rewritten.
type walker struct {
	r      *Redactor
	out    []byte
	copied int
	n      int
}

// replace writes repl in place of b[start:end].
func (w *walker) replace(b []byte, start, end int, repl []byte) {
	if w.out == nil {
		w.out = make([]byte, 0, len(b)+32)
	}
	w.out = append(w.out, b[w.copied:start]...)
	w.out = append(w.out, repl...)
	w.copied = end
	w.n++
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// value walks the value at b[i:] and returns where it ends.
func (w *walker) value(b []byte, i int, m mode, depth, inner int) (int, error) {
	if i >= len(b) {
		return i, errSyntax
	}
	if depth > maxDepth {
		end, err := skipValue(b, i)
		if err != nil {
			return end, err
		}
		w.replace(b, i, end, quote(nil, w.r.mask(string(b[i:end]))))
		return end, nil
	}
	switch c := b[i]; {
	case m == modeMask:
		end, err := skipValue(b, i)
		if err != nil {
			return end, err
		}
		raw := b[i:end]
		if c == '"' {
			if s, err := unquote(raw); err == nil && isMask(s) {
				return end, nil
			}
		}
		w.replace(b, i, end, quote(nil, w.r.mask(string(raw))))
		return end, nil
	case c == '{':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, errSyntax
			}
			kend, err := skipString(b, i)
			if err != nil {
				return kend, err
			}
			child, err := w.r.keyMode(b[i:kend])
			if err != nil {
				return kend, err
			}
			i = skipSpace(b, kend)
			if i >= len(b) || b[i] != ':' {
				return i, errSyntax
			}
			i = skipSpace(b, i+1)
			if i, err = w.value(b, i, child, depth+1, inner); err != nil {
				return i, err
			}
			i = skipSpace(b, i)
			if i < len(b) && b[i] == ',' {
				i = skipSpace(b, i+1)
				continue
			}
			if i < len(b) && b[i] == '}' {
				return i + 1, nil
			}
			return i, errSyntax
		}
	case c == '[':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = w.value(b, i, m, depth+1, inner); err != nil {
				return i, err
			}
			i = skipSpace(b, i)
			if i < len(b) && b[i] == ',' {
				i = skipSpace(b, i+1)
				continue
			}
			if i < len(b) && b[i] == ']' {
				return i + 1, nil
			}
			return i, errSyntax
		}
	case c == '"':
		end, err := skipString(b, i)
		if err != nil {
			return end, err
		}
		if m == modeKeep {
			return end, nil
		}
		s, err := unquote(b[i:end])
		if err != nil {
			return end, err
		}
		out, n := w.r.Text(s)
		if t := strings.TrimSpace(out); inner < maxInnerJSON && len(t) > 1 && (t[0] == '{' || t[0] == '[') {
			// JSON text inside a string (MCP results carry it in
			// content[].text): its keys count too.
			sub := walker{r: w.r}
			tb := []byte(out)
			if e, err := sub.value(tb, skipSpace(tb, 0), modeNormal, depth+1, inner+1); err == nil && skipSpace(tb, e) == len(tb) && sub.n > 0 {
				sub.out = append(sub.out, tb[sub.copied:]...)
				out, n = string(sub.out), n+sub.n
			}
		}
		if n > 0 {
			w.replace(b, i, end, quote(nil, out))
			w.n += n - 1
		}
		return end, nil
	default:
		return skipLiteral(b, i)
	}
}

// skipValue returns the end of the value at b[i:].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return i, errSyntax
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				e, err := skipString(b, i)
				if err != nil {
					return e, err
				}
				i = e
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return i, errSyntax
	}
	return skipLiteral(b, i)
}

func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return len(b), errSyntax
}

func skipLiteral(b []byte, i int) (int, error) {
	j := i
	for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] >= 'a' && b[j] <= 'z' || b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'E') {
		j++
	}
	if j == i {
		return i, errSyntax
	}
	return j, nil
}

// unquote returns the text of a JSON string. Without escapes it is a view
// of raw, not a copy: a string read by the walker is matched, masked into
// new text or left as it is, never kept, and raw does not change while it
// is read.
func unquote(raw []byte) (string, error) {
	if len(raw) < 2 {
		return "", errSyntax
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return unsafe.String(unsafe.SliceData(body), len(body)), nil
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(body) {
			return "", errSyntax
		}
		switch body[i] {
		case '"', '\\', '/':
			out = append(out, body[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(body, i+1)
			if !ok {
				return "", errSyntax
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(body, i+3); ok && i+2 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 6
					}
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", errSyntax
		}
	}
	return string(out), nil
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// quote appends s as a JSON string.
func quote(dst []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
