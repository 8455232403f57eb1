package clickhouse

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The spool's own encoding of a batch: every field of every row in the
// order the row types declare them, strings and lists with their length
// before them, integers as varints. gob, which earlier releases wrote,
// allocated about as much again as the batch while encoding it and was the
// largest cost of an acknowledgement after the sync. A field added to a row
// type must be added here too: TestSpoolCodec_EveryField fails until it is.

type spoolEncoder struct{ b []byte }

func (e *spoolEncoder) str(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *spoolEncoder) strs(ss []string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

func (e *spoolEncoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *spoolEncoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }

// appendBatch appends the encoding of b to dst.
func appendBatch(dst []byte, b *batch) []byte {
	e := spoolEncoder{b: dst}
	e.str(b.Token)
	var done uint64
	for t, d := range b.Done {
		if d {
			done |= 1 << t
		}
	}
	e.uint(done)
	e.uint(uint64(len(b.Calls)))
	for i := range b.Calls {
		r := &b.Calls[i]
		e.str(r.Tenant)
		e.str(r.Server)
		e.str(r.Document)
		e.int(r.Time)
		e.uint(uint64(r.TimeNanos))
		e.str(r.ID)
		e.strs(r.OtherDocuments)
		e.int(r.DurationNS)
		e.str(r.Session)
		e.str(r.Client)
		e.str(r.TraceID)
		e.str(r.SpanID)
		e.str(r.Fingerprint)
		e.str(r.RPCID)
		e.str(r.Method)
		e.str(r.Tool)
		e.str(r.ToolLabel)
		e.str(r.Arguments)
		e.str(r.Result)
		e.int(r.ErrorCode)
		e.str(r.ErrorMessage)
		e.str(r.ErrorData)
		e.str(r.TransportError)
		e.str(r.Source)
		e.str(r.Outcome)
		e.str(r.FailureCode)
		e.str(r.FailureAction)
		e.str(r.FailureMessage)
		e.str(r.Reading)
		e.uint(uint64(r.Flags))
		e.uint(r.Version)
		e.uint(r.Chain)
	}
	e.uint(uint64(len(b.Writes)))
	for i := range b.Writes {
		r := &b.Writes[i]
		e.str(r.Tenant)
		e.str(r.Server)
		e.str(r.Document)
		e.int(r.Time)
		e.uint(uint64(r.TimeNanos))
		e.str(r.CallID)
		e.int(int64(r.Seq))
		e.str(r.Session)
		e.str(r.Tool)
		e.str(r.Key)
		e.str(r.State)
		e.str(r.Reason)
		e.str(r.Action)
		e.int(r.StateDelay)
		e.uint(r.Version)
	}
	e.uint(uint64(len(b.Findings)))
	for i := range b.Findings {
		r := &b.Findings[i]
		e.str(r.Tenant)
		e.str(r.Server)
		e.str(r.Document)
		e.int(r.Time)
		e.uint(uint64(r.TimeNanos))
		e.str(r.ID)
		e.str(r.Kind)
		e.str(r.Severity)
		e.str(r.Key)
		e.str(r.Session)
		e.strs(r.Calls)
		e.str(r.Reason)
		e.str(r.RetryAction)
		e.str(r.Summary)
		e.uint(r.Version)
		e.uint(r.Chain)
	}
	e.uint(uint64(len(b.Watermarks)))
	for i := range b.Watermarks {
		r := &b.Watermarks[i]
		e.str(r.Replica)
		e.int(r.Time)
		e.uint(uint64(r.TimeNanos))
		e.uint(r.Version)
	}
	// Last, and only when there are any: a batch without calls too late is
	// encoded as before they came, and one spooled before reads back
	// with none.
	if len(b.TooLate) > 0 {
		e.uint(uint64(len(b.TooLate)))
		for i := range b.TooLate {
			r := &b.TooLate[i]
			e.str(r.Tenant)
			e.int(r.Time)
			e.uint(uint64(r.TimeNanos))
			e.str(r.CallID)
			e.uint(r.Version)
		}
	}
	return e.b
}

// encodedSize estimates the length of b's encoding, so that the buffer is
// allocated once.
func encodedSize(b *batch) int {
	n := 64
	for i := range b.Calls {
		r := &b.Calls[i]
		n += 160 + len(r.Document) + len(r.ID) + len(r.Session) + len(r.TraceID) + len(r.SpanID) + len(r.RPCID) +
			len(r.Arguments) + len(r.Result) + len(r.ErrorMessage) + len(r.ErrorData) + len(r.Source) + len(r.Reading)
	}
	return n + 128*(len(b.Writes)+len(b.Findings)+len(b.Watermarks)+len(b.TooLate))
}

type spoolDecoder struct {
	// s is the whole encoding as one string: the rows' strings are parts
	// of it, one allocation for the batch.
	s   string
	off int
	err error
}

// fail records the first damage found, at the current offset, and stops
// the decoding: every later read returns zero values.
func (d *spoolDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = &corruptError{Offset: int64(d.off), InBatch: true, Reason: fmt.Sprintf(format, args...)}
	}
	d.off = len(d.s)
}

func (d *spoolDecoder) uint() uint64 {
	v, n := uvarintString(d.s[d.off:])
	if n <= 0 {
		if n == 0 && len(d.s)-d.off < binary.MaxVarintLen64 {
			d.fail("the batch ends inside a varint")
		} else {
			d.fail("a varint longer than 64 bits")
		}
		return 0
	}
	d.off += n
	return v
}

// uintMax reads an unsigned value that must fit its field (at most max).
func (d *spoolDecoder) uintMax(max uint64, field string) uint64 {
	at := d.off
	v := d.uint()
	if v > max {
		d.off = at
		d.fail("%s %d does not fit its field (at most %d)", field, v, max)
		return 0
	}
	return v
}

func (d *spoolDecoder) int() int64 {
	u := d.uint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

// int32 reads a signed value that must fit 32 bits.
func (d *spoolDecoder) int32(field string) int32 {
	at := d.off
	v := d.int()
	if v != int64(int32(v)) {
		d.off = at
		d.fail("%s %d does not fit its field (32 bits)", field, v)
		return 0
	}
	return int32(v)
}

func (d *spoolDecoder) str() string {
	at := d.off
	n := d.uint()
	if left := len(d.s) - d.off; n > uint64(left) {
		d.off = at
		d.fail("a string of %d bytes, more than the %d left", n, left)
		return ""
	}
	s := d.s[d.off : d.off+int(n)]
	d.off += int(n)
	return s
}

// count reads a list length, refusing one that the bytes left cannot
// hold (every element takes at least minBytes), so that a damaged count
// cannot size an allocation past what the batch's bytes make.
func (d *spoolDecoder) count(minBytes int, what string) int {
	at := d.off
	n := d.uint()
	if left := uint64(len(d.s) - d.off); n > left/uint64(minBytes) {
		d.off = at
		d.fail("a count of %d %s, more than the %d bytes left can hold", n, what, left)
		return 0
	}
	return int(n)
}

func (d *spoolDecoder) strs() []string {
	n := d.count(1, "strings")
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str()
	}
	return out
}

// uvarintString is binary.Uvarint on a string.
func uvarintString(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -1
			}
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

// decodeBatch is the inverse of appendBatch.
func decodeBatch(data []byte) (*batch, error) {
	d := &spoolDecoder{s: string(data)}
	b := &batch{Token: d.str()}
	done := d.uintMax(1<<nTables-1, "the acknowledged tables")
	for t := range b.Done {
		b.Done[t] = done&(1<<t) != 0
	}
	if n := d.count(minCallBytes, "calls"); n > 0 {
		b.Calls = make([]callRow, n)
		for i := range b.Calls {
			r := &b.Calls[i]
			r.Tenant = d.str()
			r.Server = d.str()
			r.Document = d.str()
			r.Time = d.int()
			r.TimeNanos = uint32(d.uintMax(math.MaxUint32, "time_nanos"))
			r.ID = d.str()
			r.OtherDocuments = d.strs()
			r.DurationNS = d.int()
			r.Session = d.str()
			r.Client = d.str()
			r.TraceID = d.str()
			r.SpanID = d.str()
			r.Fingerprint = d.str()
			r.RPCID = d.str()
			r.Method = d.str()
			r.Tool = d.str()
			r.ToolLabel = d.str()
			r.Arguments = d.str()
			r.Result = d.str()
			r.ErrorCode = d.int()
			r.ErrorMessage = d.str()
			r.ErrorData = d.str()
			r.TransportError = d.str()
			r.Source = d.str()
			r.Outcome = d.str()
			r.FailureCode = d.str()
			r.FailureAction = d.str()
			r.FailureMessage = d.str()
			r.Reading = d.str()
			r.Flags = uint8(d.uintMax(math.MaxUint8, "flags"))
			r.Version = d.uint()
			r.Chain = d.uint()
		}
	}
	if n := d.count(minWriteBytes, "writes"); n > 0 {
		b.Writes = make([]writeRow, n)
		for i := range b.Writes {
			r := &b.Writes[i]
			r.Tenant = d.str()
			r.Server = d.str()
			r.Document = d.str()
			r.Time = d.int()
			r.TimeNanos = uint32(d.uintMax(math.MaxUint32, "time_nanos"))
			r.CallID = d.str()
			r.Seq = d.int32("seq")
			r.Session = d.str()
			r.Tool = d.str()
			r.Key = d.str()
			r.State = d.str()
			r.Reason = d.str()
			r.Action = d.str()
			r.StateDelay = d.int()
			r.Version = d.uint()
		}
	}
	if n := d.count(minFindingBytes, "findings"); n > 0 {
		b.Findings = make([]findingRow, n)
		for i := range b.Findings {
			r := &b.Findings[i]
			r.Tenant = d.str()
			r.Server = d.str()
			r.Document = d.str()
			r.Time = d.int()
			r.TimeNanos = uint32(d.uintMax(math.MaxUint32, "time_nanos"))
			r.ID = d.str()
			r.Kind = d.str()
			r.Severity = d.str()
			r.Key = d.str()
			r.Session = d.str()
			r.Calls = d.strs()
			r.Reason = d.str()
			r.RetryAction = d.str()
			r.Summary = d.str()
			r.Version = d.uint()
			r.Chain = d.uint()
		}
	}
	if n := d.count(minWatermarkBytes, "watermarks"); n > 0 {
		b.Watermarks = make([]watermarkRow, n)
		for i := range b.Watermarks {
			r := &b.Watermarks[i]
			r.Replica = d.str()
			r.Time = d.int()
			r.TimeNanos = uint32(d.uintMax(math.MaxUint32, "time_nanos"))
			r.Version = d.uint()
		}
	}
	if d.err == nil && d.off != len(d.s) {
		// Written only when there are any: a count of 0 is damage.
		n := d.count(minTooLateBytes, "calls too late")
		if n == 0 && d.err == nil {
			d.fail("an empty list of calls too late")
		}
		if n > 0 {
			b.TooLate = make([]tooLateRow, n)
			for i := range b.TooLate {
				r := &b.TooLate[i]
				r.Tenant = d.str()
				r.Time = d.int()
				r.TimeNanos = uint32(d.uintMax(math.MaxUint32, "time_nanos"))
				r.CallID = d.str()
				r.Version = d.uint()
			}
		}
	}
	if d.err == nil && d.off != len(d.s) {
		d.fail("%d bytes after the batch", len(d.s)-d.off)
	}
	if d.err != nil {
		return nil, d.err
	}
	return b, nil
}
