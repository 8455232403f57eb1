package detect

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/mcpaudit/mcpaudit/audit"
)

// A call waiting for its partition's watermark is, in the live service,
// kept packed (Engine.PackWaiting): its lean record (audit.Record.Lean) is
// an audit.Record, an audit.Call and its operations, about 900 bytes in
// four objects, where the same texts and numbers packed are about 250
// bytes in one, with no pointer for the collector to follow. A call waits
// as long as the slowest exporter of its server holds the watermark back,
// so that tens of thousands may wait at once. It is unpacked to be judged.
//
// The packing: a flags byte; the call's texts, each a uvarint length and
// its bytes; its time, duration and arrival as varints (unix nanoseconds);
// then the reading in its stored encoding (audit.AppendReading). Only a
// lean record is packed: its payloads are nil, so nothing is lost.

// Flags of a packed call.
const (
	packResponded = 1 << iota
	packTime
	packReceived
)

// packable reports whether r is a lean record, which packing keeps whole.
func packable(r *audit.Record) bool {
	c := r.Call
	return c != nil && c.Arguments == nil && c.Result == nil && c.Error == nil && c.TransportError == "" && c.Source == ""
}

// packRecord appends the packing of r, a lean record, to b.
func packRecord(b []byte, r *audit.Record) []byte {
	c := r.Call
	var flags byte
	if c.Responded {
		flags |= packResponded
	}
	if !c.Time.IsZero() {
		flags |= packTime
	}
	if !c.Received.IsZero() {
		flags |= packReceived
	}
	b = append(b, flags)
	for _, s := range [...]string{c.ID, c.Fingerprint, c.Server, c.Session, c.Client, c.Tenant, c.TraceID, c.SpanID, c.RPCID, c.Method, c.Tool} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	if flags&packTime != 0 {
		b = binary.AppendVarint(b, c.Time.UnixNano())
	}
	b = binary.AppendVarint(b, int64(c.Duration))
	if flags&packReceived != 0 {
		b = binary.AppendVarint(b, c.Received.UnixNano())
	}
	return audit.AppendReading(b, r)
}

// unpackRecord returns the record packRecord packed in p. Its texts are
// views of p, but for the fingerprints the reading stores packed:
// unpacking is on the live service's path of every call (prof51, eng52 in
// docs/benchmarks.md).
func unpackRecord(p string) (*audit.Record, error) {
	l := &struct {
		r audit.Record
		c audit.Call
	}{}
	c := &l.c
	rest := p
	bad := false
	uvarint := func() uint64 {
		v, n := binary.Uvarint(unsafe.Slice(unsafe.StringData(rest), len(rest)))
		if n <= 0 {
			bad, rest = true, ""
			return 0
		}
		rest = rest[n:]
		return v
	}
	varint := func() int64 {
		v, n := binary.Varint(unsafe.Slice(unsafe.StringData(rest), len(rest)))
		if n <= 0 {
			bad, rest = true, ""
			return 0
		}
		rest = rest[n:]
		return v
	}
	if len(rest) == 0 {
		return nil, fmt.Errorf("cannot unpack a waiting call: empty")
	}
	flags := rest[0]
	rest = rest[1:]
	for _, s := range [...]*string{&c.ID, &c.Fingerprint, &c.Server, &c.Session, &c.Client, &c.Tenant, &c.TraceID, &c.SpanID, &c.RPCID, &c.Method, &c.Tool} {
		n := uvarint()
		if n > uint64(len(rest)) {
			bad, rest = true, ""
			break
		}
		*s, rest = rest[:n], rest[n:]
	}
	if flags&packTime != 0 {
		c.Time = time.Unix(0, varint()).UTC()
	}
	c.Duration = time.Duration(varint())
	if flags&packReceived != 0 {
		c.Received = time.Unix(0, varint()).UTC()
	}
	c.Responded = flags&packResponded != 0
	if bad {
		return nil, fmt.Errorf("cannot unpack a waiting call: truncated")
	}
	if err := audit.ReadReadingViews(unsafe.Slice(unsafe.StringData(rest), len(rest)), &l.r); err != nil {
		return nil, fmt.Errorf("cannot unpack a waiting call: %w", err)
	}
	l.r.Call = c
	return &l.r, nil
}

// pack packs the waiting observation's record, when it is lean; scratch
// is the engine's buffer, returned grown.
func (s *seen) pack(scratch []byte) []byte {
	if s.r == nil || !packable(s.r) {
		return scratch
	}
	scratch = packRecord(scratch[:0], s.r)
	s.packed, s.r = string(scratch), nil
	return scratch
}

// record returns the observation's record, unpacked (and kept so) when
// it waits packed; nil once judged.
func (s *seen) record() *audit.Record {
	if s.r == nil && s.packed != "" {
		r, err := unpackRecord(s.packed)
		if err != nil {
			// The engine packed it: this is a bug, not bad input.
			panic(err)
		}
		s.r, s.packed = r, ""
	}
	return s.r
}

// forget drops the observation's record, packed or not.
func (s *seen) forget() { s.r, s.packed = nil, "" }
