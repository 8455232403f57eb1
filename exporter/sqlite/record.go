package sqlite

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// A call row keeps its id and time in columns (they are indexed) and every
// other field of the Record in one blob: the fields below, in this order,
// each a uvarint length then the bytes, compressed as a whole (codec.go).
// Optional byte slices store length+1 so that nil and empty stay distinct.
// Hex strings (trace and span ids) are stored packed, half their size.
//
// The layout is versioned by the codec byte that starts every blob; a change
// here needs a new codec byte, never a reinterpretation of stored rows.

// errCorrupt is returned when a stored blob cannot be decoded.
var errCorrupt = errors.New("corrupt call blob")

// appendRecord appends the fields of r that are not columns.
func appendRecord(b []byte, r *audit.Record) []byte {
	c := r.Call
	b = binary.AppendVarint(b, int64(c.Duration))
	for _, s := range []string{c.Server, c.Session, c.Client, c.Tenant} {
		b = appendString(b, s)
	}
	b = appendHex(b, c.TraceID)
	b = appendHex(b, c.SpanID)
	for _, s := range []string{c.RPCID, c.Method, c.Tool} {
		b = appendString(b, s)
	}
	b = appendFingerprint(b, c)
	b = appendOpt(b, c.Arguments)
	b = appendBool(b, c.Responded)
	b = appendOpt(b, c.Result)
	b = appendBool(b, c.Error != nil)
	if c.Error != nil {
		b = binary.AppendVarint(b, c.Error.Code)
		b = appendString(b, c.Error.Message)
		b = appendOpt(b, c.Error.Data)
	}
	b = appendString(b, c.TransportError)
	b = appendString(b, c.Source)
	// The dialect's reading ends the blob (audit.AppendReading).
	return audit.AppendReading(b, r)
}

// readRecord decodes what appendRecord wrote into r, whose Call must be set
// with its ID and Time.
func readRecord(b []byte, r *audit.Record) error {
	d := decoder{b: b}
	c := r.Call
	c.Duration = time.Duration(d.varint())
	for _, p := range []*string{&c.Server, &c.Session, &c.Client, &c.Tenant} {
		*p = d.string()
	}
	c.TraceID = d.hex()
	c.SpanID = d.hex()
	for _, p := range []*string{&c.RPCID, &c.Method, &c.Tool} {
		*p = d.string()
	}
	fp := d.uvarint()
	if fp >= fingerprintLiteral {
		c.Fingerprint = string(d.bytes(fp - fingerprintLiteral))
	}
	c.Arguments = d.opt()
	c.Responded = d.bool()
	c.Result = d.opt()
	if d.bool() {
		c.Error = &audit.RPCError{Code: d.varint(), Message: d.string(), Data: d.opt()}
	}
	c.TransportError = d.string()
	c.Source = d.string()
	if d.bad {
		return errCorrupt
	}
	if err := audit.ReadReading(d.b, r); err != nil {
		return errCorrupt
	}
	if fp == fingerprintDerived {
		c.Fingerprint = store.Fingerprint(c)
	}
	return nil
}

// A call's fingerprint is 16 random-looking bytes that every carrier
// derives the same way from the request; it is stored as a mark that says
// so, and derived again on reading (16 incompressible bytes a call less).
// One that differs is stored as it is.
const (
	fingerprintNone    = 0
	fingerprintDerived = 1
	fingerprintLiteral = 2 // then the length plus 2, and the bytes
)

func appendFingerprint(b []byte, c *audit.Call) []byte {
	switch {
	case c.Fingerprint == "":
		return binary.AppendUvarint(b, fingerprintNone)
	case store.Derived(c):
		return binary.AppendUvarint(b, fingerprintDerived)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Fingerprint))+fingerprintLiteral)
	return append(b, c.Fingerprint...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendOpt(b, v []byte) []byte {
	if v == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// appendHex packs s when it is lowercase hex of even length: the uvarint
// holds the stored length times two, plus one when packed.
func appendHex(b []byte, s string) []byte {
	if len(s) == 0 || len(s)%2 != 0 || !isLowerHex(s) {
		b = binary.AppendUvarint(b, uint64(len(s))<<1)
		return append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(s)/2)<<1|1)
	b, _ = hex.AppendDecode(b, []byte(s)) // checked by isLowerHex
	return b
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// decoder reads fields; after the first error every read returns zero and
// bad is set, so that callers check once at the end.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes(d.uvarint())) }

func (d *decoder) opt() []byte {
	n := d.uvarint()
	if n == 0 || d.bad {
		return nil
	}
	v := d.bytes(n - 1)
	if v == nil {
		return nil
	}
	// Copy: the blob buffer is reused by the caller.
	return append(make([]byte, 0, len(v)), v...)
}

func (d *decoder) bool() bool {
	v := d.bytes(1)
	return len(v) == 1 && v[0] == 1
}

func (d *decoder) hex() string {
	n := d.uvarint()
	v := d.bytes(n >> 1)
	if n&1 == 0 {
		return string(v)
	}
	return hex.EncodeToString(v)
}

func (d *decoder) fail() {
	d.bad = true
	d.b = nil
}

// Times are stored as unix nanoseconds; the zero time as math.MinInt64 so
// that it round-trips and sorts first.
const zeroTime = math.MinInt64

// minTime and maxTime bound the times that unix nanoseconds can hold.
var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64)
)

// nanos returns the stored form of t; ok is false when t cannot be stored.
func nanos(t time.Time) (n int64, ok bool) {
	if t.IsZero() {
		return zeroTime, true
	}
	if t.Before(minTime) || t.After(maxTime) {
		return 0, false
	}
	return t.UnixNano(), true
}

// fromNanos is the inverse of nanos; times come back in UTC.
func fromNanos(n int64) time.Time {
	if n == zeroTime {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// recordHead returns the server, session and tenant of an encoded record
// (appendRecord writes them first) without decoding the rest, and false
// when the record is too short to hold them. A scan that filters on them
// skips the full decoding of the records it does not keep: a session's
// calls are read from every call of the minutes it made calls in
// (session_minutes), thousands for each of its own on a busy store.
func recordHead(b []byte) (server, session, tenant []byte, ok bool) {
	d := decoder{b: b}
	d.varint()
	server = d.bytes(d.uvarint())
	session = d.bytes(d.uvarint())
	d.bytes(d.uvarint()) // client
	tenant = d.bytes(d.uvarint())
	return server, session, tenant, !d.bad
}

// recordClient returns the client of an encoded record without decoding
// the rest (as recordHead), and false when the record is too short.
func recordClient(b []byte) (client []byte, ok bool) {
	d := decoder{b: b}
	d.varint()
	d.bytes(d.uvarint()) // server
	d.bytes(d.uvarint()) // session
	client = d.bytes(d.uvarint())
	return client, !d.bad
}

// AppendRecord appends the encoding the store keeps of r (every field but
// the call's ID and Time, which a row keeps in columns), uncompressed, so
// that another log of calls (internal/calllog) stores calls exactly as
// this store does rather than in an encoding of its own.
func AppendRecord(b []byte, r *audit.Record) []byte { return appendRecord(b, r) }

// ReadRecord decodes what AppendRecord wrote into r, whose Call must be set
// with its ID and Time. It returns an error matching none of the store's
// sentinels when b is not such an encoding.
func ReadRecord(b []byte, r *audit.Record) error { return readRecord(b, r) }

// TimeNanos returns t as this store keeps a time (unix nanoseconds, the
// zero time math.MinInt64 so that it sorts first and round-trips); ok is
// false when t cannot be held. internal/calllog keeps its times so too.
func TimeNanos(t time.Time) (n int64, ok bool) { return nanos(t) }

// NanosTime is the inverse of TimeNanos; times come back in UTC.
func NanosTime(n int64) time.Time { return fromNanos(n) }
