package receiver

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mcpaudit/mcpaudit/audit"
	mx "github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/memlimit"
)

// recordError rejects one record (a call record or a span) with its reason.
type recordError struct {
	reason mx.RejectReason
	msg    string
}

func (e *recordError) Error() string { return e.msg }

func reject(reason mx.RejectReason, format string, args ...any) *recordError {
	return &recordError{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// check applies the per-call limits: printable UTF-8 names and ids under
// their cap, payloads under theirs and no deeper than the limit, valid UTF-8
// JSON, a storable time no more than MaxFuture ahead of the clock. where
// names the record in the error, timeField the field its time came from.
func (rc *Receiver) check(c *audit.Call, where, timeField string) *recordError {
	for _, f := range []struct{ name, v string }{
		{"server", c.Server}, {"tool", c.Tool}, {"session", c.Session}, {"client", c.Client},
		{"method", c.Method}, {"id", c.RPCID}, {"trace_id", c.TraceID}, {"span_id", c.SpanID},
	} {
		if len(f.v) > rc.cfg.MaxNameBytes {
			return reject(mx.RejectTooLong, "%s: field %s: %d bytes, more than the limit of %d (serve.receiver.max_name_bytes)", where, f.name, len(f.v), rc.cfg.MaxNameBytes)
		}
		if i := badText(f.v); i >= 0 {
			return reject(mx.RejectInvalidText, "%s: field %s: %s at byte offset %d; names and ids must be printable UTF-8", where, f.name, badTextReason(f.v, i), i)
		}
	}
	if c.Server == "" {
		return reject(mx.RejectMissingField, "%s: field server: empty", where)
	}
	for _, f := range []struct {
		name string
		v    []byte
	}{{"arguments", c.Arguments}, {"result", c.Result}, {"error.data", errData(c)}} {
		if len(f.v) > rc.cfg.MaxPayloadBytes {
			return reject(mx.RejectTooLarge, "%s: field %s: %d bytes, more than the limit of %d (serve.receiver.max_payload_bytes)", where, f.name, len(f.v), rc.cfg.MaxPayloadBytes)
		}
		if !utf8.Valid(f.v) {
			return reject(mx.RejectInvalidText, "%s: field %s: invalid UTF-8 at byte offset %d", where, f.name, invalidAt(f.v))
		}
		if d, at, _ := jsonScan(f.v, rc.cfg.MaxDepth); d > rc.cfg.MaxDepth {
			return reject(mx.RejectTooDeep, "%s: field %s: nested deeper than %d levels at byte offset %d (serve.receiver.max_depth)", where, f.name, rc.cfg.MaxDepth, at)
		}
	}
	for _, f := range []struct{ name, v string }{{"error.message", errMessage(c)}, {"transport_error", c.TransportError}} {
		if len(f.v) > rc.cfg.MaxPayloadBytes {
			return reject(mx.RejectTooLarge, "%s: field %s: %d bytes, more than the limit of %d (serve.receiver.max_payload_bytes)", where, f.name, len(f.v), rc.cfg.MaxPayloadBytes)
		}
		if !utf8.ValidString(f.v) {
			return reject(mx.RejectInvalidText, "%s: field %s: invalid UTF-8 at byte offset %d", where, f.name, invalidAt([]byte(f.v)))
		}
	}
	if y := c.Time.Year(); y < 1678 || y > 2261 {
		return reject(mx.RejectBadTime, "%s: field %s: %s is outside 1678-2261, which cannot be stored", where, timeField, c.Time.Format(time.RFC3339))
	}
	if !c.Time.After(epoch) {
		// A clock never set, or a time written as 0: no call of MCP is
		// that old, and retention would take it at its next round.
		return reject(mx.RejectBadTime, "%s: field %s: %s is not after the Unix epoch (1970-01-01T00:00:00Z): a clock not set, or a zero time",
			where, timeField, c.Time.Format(time.RFC3339Nano))
	}
	now := time.Now
	if rc.Now != nil {
		now = rc.Now
	}
	if clock := now(); c.Time.Sub(clock) > rc.cfg.MaxFuture {
		// Retention deletes by event time: such a call would be kept for
		// ever, and a source's clock this wrong is no skew to take.
		return reject(mx.RejectBadTime, "%s: field %s: %s is more than %s ahead of the collector's clock (%s; serve.receiver.max_future)",
			where, timeField, c.Time.Format(time.RFC3339), rc.cfg.MaxFuture, clock.UTC().Format(time.RFC3339))
	}
	return nil
}

// epoch is the Unix epoch, which no call's time may be at or before.
var epoch = time.Unix(0, 0)

// retained rejects, with its error and where it is, each call of t older
// than retention keeps once the request's calls are stored (Retained),
// and keeps the others. It runs once every call of the request is taken:
// the request's newest call moves retention's cutoff.
func (t *taker) retained(fn func(where string, err *recordError)) {
	if t.rc.Retained == nil || len(t.recs) == 0 {
		return
	}
	var newest time.Time
	for _, r := range t.recs {
		if r.Call.Time.After(newest) {
			newest = r.Call.Time
		}
	}
	oldest, setting := t.rc.Retained(t.tenant, newest)
	if oldest.IsZero() {
		return
	}
	n := 0
	for i, r := range t.recs {
		c := r.Call
		if !c.Time.Before(oldest) {
			t.recs[n], t.srcs[n], t.wheres[n] = r, t.srcs[i], t.wheres[i]
			n++
			continue
		}
		where := t.wheres[i]
		fn(where, reject(mx.RejectBadTime, "%s: field %s: %s is older than retention keeps: calls before %s are deleted (%s); it would be acknowledged, then deleted",
			where, t.timeField(), c.Time.Format(time.RFC3339Nano), oldest.UTC().Format(time.RFC3339), setting))
	}
	clear(t.recs[n:])
	t.recs, t.srcs, t.wheres = t.recs[:n], t.srcs[:n], t.wheres[:n]
}

// checkSource checks the name of the source a call came on. A poster's
// (Mcpaudit-Source) is checked with its request; an OTLP source is named
// after its resource's service.name, service.instance.id and host.name,
// which no other check bounds, and the name is kept in memory, in the state
// file, in the status answer and in log lines: each part may take
// serve.receiver.max_name_bytes, printable UTF-8.
func (rc *Receiver) checkSource(source, where string) *recordError {
	if limit := len("otlp:") + 3*rc.cfg.MaxNameBytes + 2; len(source) > limit {
		return reject(mx.RejectTooLong, "%s: resource: its source name (service.name/service.instance.id/host.name) has %d bytes, more than the limit of %d (3 × serve.receiver.max_name_bytes)", where, len(source), limit)
	}
	if i := badText(source); i >= 0 {
		return reject(mx.RejectInvalidText, "%s: resource: its source name (service.name/service.instance.id/host.name) has %s at byte offset %d; names must be printable UTF-8", where, badTextReason(source, i), i)
	}
	return nil
}

func errData(c *audit.Call) []byte {
	if c.Error == nil {
		return nil
	}
	return c.Error.Data
}

func errMessage(c *audit.Call) string {
	if c.Error == nil {
		return ""
	}
	return c.Error.Message
}

// badText returns the byte offset of the first invalid UTF-8 sequence or
// control character of s, or -1.
func badText(s string) int {
	// Names and ids are mostly ASCII: checked a byte at a time until the
	// first byte that is not.
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			if j := badUTF8Text(s[i:]); j >= 0 {
				return i + j
			}
			return -1
		}
		if c < 0x20 || c == 0x7f {
			return i
		}
	}
	return -1
}

func badUTF8Text(s string) int {
	for i, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			if r == utf8.RuneError {
				if _, size := utf8.DecodeRuneInString(s[i:]); size != 1 {
					continue // a genuine U+FFFD
				}
			}
			return i
		}
	}
	return -1
}

func badTextReason(s string, i int) string {
	if r, size := utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && size == 1 {
		return "invalid UTF-8"
	}
	return "a control character"
}

func invalidAt(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// jsonScan reads the JSON text b once for two answers. depth is how
// deeply b nests, the scan stopping once it passes limit, and at the byte
// offset where it did (-1 when it did not). end is the offset just after
// the object that b starts with (after white space), once it closes, or
// -1 when b does not start with one, it does not close (b cut short, or
// not JSON), or the scan stopped at the limit before it closed. Strings
// are skipped. Brackets are only counted, not matched: what is not JSON
// is left to the decoder to report.
func jsonScan(b []byte, limit int) (depth, at, end int) {
	end = -1
	start := 0
	for start < len(b) && (b[start] == ' ' || b[start] == '\t' || b[start] == '\r' || b[start] == '\n') {
		start++
	}
	// Only an object's end is looked for; past it, the depth alone.
	open := start < len(b) && b[start] == '{'
	d := 0
	for i := start; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = stringEnd(b, i+1)
		case '{', '[':
			d++
			if d > depth {
				depth = d
				if depth > limit {
					return depth, i, end
				}
			}
		case '}', ']':
			d--
			if d == 0 && open {
				end, open = i+1, false
			}
		}
	}
	return depth, -1, end
}

// stringEnd returns the offset of the quote that closes the JSON string
// whose text starts at b[i:], or len(b). Payloads are mostly string bytes:
// the closing quote is searched for rather than stepped to, and a quote
// after an odd run of backslashes is escaped.
func stringEnd(b []byte, i int) int {
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		n := 0
		for k := q - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		i = q + 1
	}
	return len(b)
}

// badSourceName reports what is wrong with a source name, or "".
func badSourceName(name string) string {
	if len(name) > maxSourceName {
		return fmt.Sprintf("%d bytes, more than the limit of %d; it must be printable UTF-8 of at most %d bytes", len(name), maxSourceName, maxSourceName)
	}
	if i := badText(name); i >= 0 {
		return fmt.Sprintf("%s at byte offset %d; it must be printable UTF-8 of at most %d bytes", badTextReason(name, i), i, maxSourceName)
	}
	if strings.ContainsFunc(name, unicode.IsControl) {
		return fmt.Sprintf("a control character; it must be printable UTF-8 of at most %d bytes", maxSourceName)
	}
	return ""
}

// budget counts the bytes held by requests in flight.
type budget struct {
	mu    sync.Mutex
	limit int64
	used  int64
}

func newBudget(limit int64) *budget { return &budget{limit: limit} }

// take reserves n bytes; false when that would pass the limit.
func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

func (b *budget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// Used returns the bytes held now.
func (b *budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// overMemory reports whether the heap is above share of the memory limit
// (GOMEMLIMIT, or serve.memory_limit). Without a limit it is never. When it
// is, a garbage collection starts in the background (memlimit.Over), so
// that garbage alone does not keep every request refused.
func overMemory(share float64) bool { return memlimit.Over(share) }
