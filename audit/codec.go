package audit

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"
	"unsafe"
)

// The reading of a call (its Record without the Call) is stored beside the
// call, so that the detector and the queries use it without reading the
// payloads again. AppendReading and ReadReading are its one encoding, for
// every store: a version byte, then the fields in order; strings as a
// uvarint length and the bytes, numbers as varints, times as unix
// nanoseconds (0 for the zero time). A change of layout is a new version
// byte, never a reinterpretation of stored bytes.

// ErrCorruptReading is returned by ReadReading for bytes AppendReading did
// not write.
var ErrCorruptReading = errors.New("corrupt call reading")

const readingV1 = 2

// Op flags.
const (
	flagKeyProtected = 1 << iota
	flagProtected
	flagPending
	flagHasBaseRev
	flagReplayed
	flagJournalCorrupt
)

// Op failure marks: none, the call's own failure, or one of its own.
const (
	opFailureNone = iota
	opFailureCall
	opFailureOwn
)

// AppendReading appends the encoding of r's reading (every field but Call).
func AppendReading(b []byte, r *Record) []byte {
	b = append(b, readingV1)
	b = appendStr(b, r.Dialect)
	b = appendStr(b, string(r.Outcome))
	b = appendStr(b, r.Tool)
	b = appendFailure(b, r.Failure)
	b = appendStr(b, r.RequestHash)
	b = binary.AppendUvarint(b, uint64(len(r.Ops)))
	for i := range r.Ops {
		o := &r.Ops[i]
		b = binary.AppendVarint(b, int64(o.Seq))
		b = appendStr(b, o.Tool)
		b = append(b, byte(o.Kind), byte(o.Status))
		b = append(b, bit(o.KeyProtected, flagKeyProtected)|bit(o.Protected, flagProtected)|bit(o.Pending, flagPending)|
			bit(o.HasBaseRev, flagHasBaseRev)|bit(o.Replayed, flagReplayed)|bit(o.JournalCorrupt, flagJournalCorrupt))
		// Most fields of an operation are empty: a bitmap says which
		// follow. The fingerprints are hex: stored packed.
		strs := [...]string{o.Target, o.Key, o.KeyKind, o.Intent, o.Binding, o.Identity, string(o.Reason),
			o.Sync, o.SaveState, o.Action, o.DocumentID, o.CopyState, o.NextAction}
		var present uint16
		for j, s := range strs {
			if s != "" {
				present |= 1 << j
			}
		}
		b = binary.AppendUvarint(b, uint64(present))
		for j, s := range strs {
			switch {
			case s == "":
			case j >= 3 && j <= 5:
				b = appendPacked(b, s)
			default:
				b = appendStr(b, s)
			}
		}
		switch {
		case o.Failure == nil:
			b = append(b, opFailureNone)
		case o.Failure == r.Failure:
			b = append(b, opFailureCall)
		default:
			b = append(b, opFailureOwn)
			b = appendFailure(b, o.Failure)
		}
		b = binary.AppendVarint(b, o.BaseRev)
		b = binary.AppendVarint(b, o.Rev)
		b = appendTime(b, o.RetryAfter)
	}
	return b
}

// ReadReading decodes what AppendReading wrote into r, leaving r.Call as
// it is.
func ReadReading(b []byte, r *Record) error { return readReading(reader{b: b}, r) }

// ReadReadingViews is ReadReading into views: r's strings are views of b,
// but for the fingerprints stored packed. b must not change while r or its
// strings are used, so it is for a reading held in a string, such as a
// waiting call's packing (collector/detect): decoding it then copies no
// text.
func ReadReadingViews(b []byte, r *Record) error {
	return readReading(reader{b: b, view: true}, r)
}

func readReading(d reader, r *Record) error {
	if d.byte() != readingV1 {
		return ErrCorruptReading
	}
	r.Dialect = d.str()
	r.Outcome = Outcome(d.str())
	r.Tool = d.str()
	r.Failure = d.failure()
	r.RequestHash = d.str()
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		return ErrCorruptReading
	}
	r.Ops = nil
	if n > 0 {
		r.Ops = make([]Op, n)
	}
	for i := range r.Ops {
		o := &r.Ops[i]
		o.Seq = int(d.varint())
		o.Tool = d.str()
		o.Kind, o.Status = OpKind(d.byte()), OpStatus(d.byte())
		flags := d.byte()
		o.KeyProtected, o.Protected, o.Pending = flags&flagKeyProtected != 0, flags&flagProtected != 0, flags&flagPending != 0
		o.HasBaseRev, o.Replayed, o.JournalCorrupt = flags&flagHasBaseRev != 0, flags&flagReplayed != 0, flags&flagJournalCorrupt != 0
		present := d.uvarint()
		for j, p := range [...]*string{&o.Target, &o.Key, &o.KeyKind, &o.Intent, &o.Binding, &o.Identity, (*string)(&o.Reason),
			&o.Sync, &o.SaveState, &o.Action, &o.DocumentID, &o.CopyState, &o.NextAction} {
			switch {
			case present&(1<<j) == 0:
			case j >= 3 && j <= 5:
				*p = d.packed()
			default:
				*p = d.str()
			}
		}
		switch d.byte() {
		case opFailureNone:
		case opFailureCall:
			o.Failure = r.Failure
		case opFailureOwn:
			o.Failure = d.failure()
		default:
			d.bad = true
		}
		o.BaseRev = d.varint()
		o.Rev = d.varint()
		o.RetryAfter = d.time()
	}
	if d.bad || len(d.b) != 0 {
		return ErrCorruptReading
	}
	return nil
}

func bit(on bool, b byte) byte {
	if on {
		return b
	}
	return 0
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendPacked appends s, packed to half its size when it is lowercase hex
// of even length: the uvarint holds the length times two, plus one when
// packed.
func appendPacked(b []byte, s string) []byte {
	if len(s)%2 != 0 || !lowerHex(s) {
		b = binary.AppendUvarint(b, uint64(len(s))<<1)
		return append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(s)/2)<<1|1)
	b, _ = hex.AppendDecode(b, []byte(s)) // checked by lowerHex
	return b
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func appendFailure(b []byte, f *Failure) []byte {
	if f == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = appendStr(b, f.Code)
	b = appendStr(b, string(f.Action))
	return appendStr(b, f.Message)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

// reader decodes; a short or malformed input sets bad and yields zeros.
// With view set its strings are views of b, not copies.
type reader struct {
	b    []byte
	bad  bool
	view bool
}

func (d *reader) byte() byte {
	if len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *reader) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *reader) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad = true
		d.b = nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *reader) str() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.bad = true
		d.b = nil
		return ""
	}
	s := d.text(d.b[:n])
	d.b = d.b[n:]
	return s
}

// text returns b as a string: a view of it with view set, else a copy.
func (d *reader) text(b []byte) string {
	if d.view {
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	return string(b)
}

func (d *reader) packed() string {
	n := d.uvarint()
	size := n >> 1
	if size > uint64(len(d.b)) {
		d.bad = true
		d.b = nil
		return ""
	}
	raw := d.b[:size]
	d.b = d.b[size:]
	if n&1 == 0 {
		return d.text(raw)
	}
	return hex.EncodeToString(raw)
}

func (d *reader) failure() *Failure {
	switch d.byte() {
	case 0:
		return nil
	case 1:
		return &Failure{Code: d.str(), Action: RetryAction(d.str()), Message: d.str()}
	}
	d.bad = true
	return nil
}

func (d *reader) time() time.Time {
	n := d.varint()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
