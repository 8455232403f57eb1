package detect

import (
	"hash/maphash"
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// dedupe recognizes a second observation of one exchange: the same
// (server, session, JSON-RPC id, request) within one second, or the same
// (trace_id, span_id).
//
// Both maps are keyed by the 64-bit hashes that old files (a collision, one
// in 2^64 per pair, would take two calls of one second for one): hashing a
// key once serves the three of them, and a number is cheaper to look up
// than the key's text.
type dedupe struct {
	byReq  expMap[uint64, reqSeen]
	bySpan expMap[uint64, *seen]
	// old remembers, compactly and for the allowance, what the maps above
	// forgot: observations judged long enough ago.
	old *observed
	// unanswered holds, by request hash, where each call judged without
	// its response was judged, for allowed_lateness: its answer, coming
	// that late, is judged at its place (Engine.Add, answerLate).
	unanswered expMap[uint64, []judgedUnanswered]
}

// judgedUnanswered is where a call judged without its response was
// judged: its time, its place and its source.
type judgedUnanswered struct {
	t   etime
	at  pos
	src *source
}

// judgedWithout files r, just judged without its response, at at.
func (d *dedupe) judgedWithout(r *audit.Record, at pos, src *source) {
	c := r.Call
	ct := etimeOf(c.Time)
	l := d.unanswered.at(maphash.String(ordSeed, reqKey(c)), ct)
	*l = append(*l, judgedUnanswered{t: ct, at: at, src: src})
}

// answerOf returns, and forgets, where the call r answers was judged
// without its response: the same request within the second that makes
// two observations one exchange.
func (d *dedupe) answerOf(r *audit.Record) (judgedUnanswered, bool) {
	c := r.Call
	fh := maphash.String(ordSeed, reqKey(c))
	l := d.unanswered.get(fh)
	if l == nil {
		return judgedUnanswered{}, false
	}
	ct := etimeOf(c.Time)
	for i, u := range *l {
		if dt := ct.Sub(u.t); dt <= time.Second && dt >= -time.Second {
			*l = slices.Delete(*l, i, i+1)
			return u, true
		}
	}
	return judgedUnanswered{}, false
}

// reqSeen is the observations taken under one request hash: nearly always
// one, held in the entry itself so that taking it allocates nothing more.
type reqSeen struct {
	l     []*seen
	one   [1]*seen
	first seen
	used  bool
}

// add appends a new observation and returns it.
func (q *reqSeen) add(s seen) *seen {
	p := &q.first
	if q.used {
		p = &seen{}
	}
	q.used = true
	*p = s
	if q.l == nil {
		q.l = q.one[:0]
	}
	q.l = append(q.l, p)
	return p
}

// seen is one observation taken.
type seen struct {
	// r is the record, until it is judged; nil while it waits packed.
	r *audit.Record
	// packed is the record while it waits for the watermark, when the
	// engine packs waiting calls (waiting.go).
	packed string
	// t is the call's time.
	t etime
	// src is the source that delivered it.
	src *source
	// at is where the call waits to be judged; an entry of the buffer
	// whose position differs is stale (the observation was replaced).
	at pos
	// processed is set once the detector judged the call: a second
	// observation can no longer complete it.
	processed bool
	// resp is the call's audit.Call.RespSum: what it answered, kept past
	// its record to tell a second observation of the call id that
	// answered otherwise (responseClash).
	resp uint64
}

func newDedupe() dedupe {
	return dedupe{byReq: newExpMap[uint64, reqSeen](), bySpan: newExpMap[uint64, *seen](), old: newObserved(), unanswered: newExpMap[uint64, []judgedUnanswered]()}
}

// reqKey is the request part of the duplicate key; calls built without a
// fingerprint (by hand, in tests) get one here.
func reqKey(c *audit.Call) string {
	if c.Fingerprint == "" {
		c.Fingerprint = audit.Fingerprint(c.Server, c.Session, c.RPCID, c.Tool, canon.Bytes(c.Arguments))
	}
	return c.Fingerprint
}

// clash is an id collision: an observation dropped for sharing its
// (trace_id, span_id) with another whose request differs, which is not
// a second observation of one exchange but another exchange under the
// same ids (a broken exporter, a replay tool rewriting ids).
type clash struct {
	// kept is the call that stands for the ids; empty when it was judged
	// and is no longer held. keptSrc delivered it (nil when unknown).
	kept    string
	keptSrc *source
	// dropped is the observation that is not judged, and droppedSrc the
	// source that delivered it.
	dropped    *audit.Call
	droppedSrc *source
	// differs names what differs between the two (Collision.Differs).
	differs []string
}

// taken is what take made of an observation.
type taken struct {
	// s is the entry of the call, nil when the observation duplicates a
	// call already taken.
	s *seen
	// replaced is set when the observation is an earlier one of a call
	// taken but not yet judged, which it then stands for (as it would had
	// it come first).
	replaced bool
	// dropped is the observation of two waiting ones that does not stand
	// for the call.
	dropped *audit.Record
	// col is set when the two share their span ids but not their request.
	col *clash
	// answered is set when an observation with a response completed a
	// waiting one without, under the same call id (a store keeping one
	// row per call id holds the answer aside until told: OnAnswer).
	answered bool
}

// take files r, delivered by src, and says what it is (taken). When one
// observation saw no response and the other did, the one kept takes the
// response and reading: the same request, so the same operations. Only
// after a match by span is anything more compared (col), so an exact
// duplicate costs nothing more.
func (d *dedupe) take(r *audit.Record, src *source) (t taken) {
	c := r.Call
	ct := etimeOf(c.Time)
	var dup *seen
	var bySpan bool
	var sh uint64
	hasSpan := c.TraceID != "" && c.SpanID != ""
	if hasSpan {
		// The hash of the two ids written apart is the hash of their
		// concatenation, without making it.
		var mh maphash.Hash
		mh.SetSeed(spanSeed)
		mh.WriteString(c.TraceID)
		mh.WriteString(c.SpanID)
		sh = mh.Sum64()
		if s := d.bySpan.get(sh); s != nil {
			dup, bySpan = *s, true
		}
	}
	fh := maphash.String(ordSeed, reqKey(c))
	if bySpan && dup.r != r {
		t.col = d.clashWith(dup, fh, c, ct, src)
	}
	if dup == nil {
		if q := d.byReq.get(fh); q != nil {
			for _, s := range q.l {
				dt := ct.Sub(s.t)
				if dt < 0 {
					dt = -dt
				}
				if dt <= time.Second {
					dup = s
					break
				}
			}
		}
	}
	if dup == nil && (d.old.near(fh, ct) || hasSpan && d.old.near(sh, ct)) {
		// A second observation of a call judged a while ago; or, when
		// only its span ids were seen within the second and not its
		// request, another exchange under the same ids. The two hashes
		// are filed together, so the same request would be near too.
		if hasSpan && !d.old.near(fh, ct) {
			t.col = &clash{dropped: c, droppedSrc: src, differs: []string{DiffRequest}}
		}
		return t
	}
	if dup != nil {
		if t.col == nil && dup.r != r {
			if col := responseClash(dup, c, src); col != nil {
				// Another response under the call id: dropped, as a
				// second observation is, and counted as a collision.
				t.col = col
				return t
			}
		}
		if dup.processed || dup.r == r {
			return t
		}
		kept, other := dup.record(), r
		// The earlier observation stands for the call, the smaller id on a
		// tie, as in time order whatever the arrival order.
		earlier := c.Time.Before(kept.Call.Time) || c.Time.Equal(kept.Call.Time) && c.ID < kept.Call.ID
		if earlier {
			kept, other = r, dup.r
		}
		// One observation answered and one not, under one call id: the
		// store kept the first it took and holds the answer aside when
		// that was the unanswered one, whichever of the two the engine
		// keeps for the call (the answer may be dated a fraction of a
		// millisecond before the unanswered one: review rev18l).
		if kept.Call.Responded != other.Call.Responded {
			t.answered = kept.Call.ID == other.Call.ID && kept.Call.Tenant == other.Call.Tenant
		}
		if !kept.Call.Responded && other.Call.Responded {
			kept = withResponse(kept, other)
		}
		if col := t.col; col != nil && earlier {
			// r stands for the ids now: the one waiting is dropped.
			col.kept, col.keptSrc, col.dropped, col.droppedSrc = c.ID, src, other.Call, dup.src
		}
		dup.r = kept
		if earlier {
			dup.src, dup.t = src, ct
		}
		t.s, t.replaced, t.dropped = dup, earlier, other
		return t
	}
	t.s = d.byReq.at(fh, ct).add(seen{r: r, t: ct, src: src, resp: c.RespSum})
	d.old.add(fh, ct)
	if hasSpan {
		*d.bySpan.at(sh, ct) = t.s
		d.old.add(sh, ct)
	}
	return t
}

// What differs between two exchanges under the same span ids, the values
// of Collision.Differs.
const (
	DiffSession   = "session"
	DiffRPCID     = "rpc_id"
	DiffTool      = "tool"
	DiffArguments = "arguments"
	// DiffTime: the two are more than a second apart; a span has one
	// start time however often it is sent.
	DiffTime = "time"
	// DiffRequest: the request differs, but the kept one was judged and
	// is no longer held, so what in it is not known.
	DiffRequest = "request"
	// DiffResponse: the same request at the same millisecond, so the same
	// call id, answered with another response (result, error or its
	// data): not a second observation of one exchange.
	DiffResponse = "response"
)

// responseClash returns the collision of c, delivered by src, with dup,
// an observation of the same request within a second that both answered:
// nil unless the two share their call id (the same millisecond) and their
// responses differ (audit.Call.RespSum; an unknown one, 0, differs from
// nothing). One observation without a response and one with is the same
// exchange seen from two places: take merges them.
func responseClash(dup *seen, c *audit.Call, src *source) *clash {
	if dup.resp == 0 || c.RespSum == 0 || dup.resp == c.RespSum {
		return nil
	}
	kept := c.ID
	if k := dup.record(); k != nil {
		if k.Call.ID != c.ID {
			return nil
		}
	} else if !dup.t.Time().Round(time.Millisecond).Equal(c.Time.Round(time.Millisecond)) {
		// Judged and forgotten: the same request (the hash it is filed
		// under) at the same millisecond is the same call id.
		return nil
	}
	return &clash{kept: kept, keptSrc: dup.src, dropped: c, droppedSrc: src, differs: []string{DiffResponse}}
}

// clashWith returns the collision of c, dated ct and of request hash fh,
// with dup, the observation taken under the same span ids; nil when c is
// the same exchange (same request, within a second). It runs only for a
// match by span, which an exact duplicate is too: the comparison reads
// what the observations already hold (fingerprints, lean texts), never
// the arguments again.
func (d *dedupe) clashWith(dup *seen, fh uint64, c *audit.Call, ct etime, src *source) *clash {
	dt := ct.Sub(dup.t)
	if dt < 0 {
		dt = -dt
	}
	var differs []string
	col := &clash{keptSrc: dup.src, dropped: c, droppedSrc: src}
	if k := dup.record(); k != nil {
		kc := k.Call
		col.kept = kc.ID
		if kc.Fingerprint != c.Fingerprint {
			if kc.Session != c.Session {
				differs = append(differs, DiffSession)
			}
			if kc.RPCID != c.RPCID {
				differs = append(differs, DiffRPCID)
			}
			if kc.Tool != c.Tool {
				differs = append(differs, DiffTool)
			}
			if len(differs) == 0 {
				// The fingerprint is of these, the server (one per
				// partition) and the canonical arguments.
				differs = append(differs, DiffArguments)
			}
		}
	} else if q := d.byReq.get(fh); q == nil || !slices.Contains(q.l, dup) {
		// Judged and forgotten: its request is known only as the hash it
		// is filed under.
		differs = append(differs, DiffRequest)
	}
	if dt > time.Second {
		differs = append(differs, DiffTime)
	}
	if len(differs) == 0 {
		return nil
	}
	col.differs = differs
	return col
}

// withResponse returns first with the response and reading of other, an
// observation of the same request that saw its response.
func withResponse(first, other *audit.Record) *audit.Record {
	merged := *first.Call
	oc := other.Call
	merged.Responded, merged.Result, merged.Error, merged.TransportError = true, oc.Result, oc.Error, ""
	merged.Arguments = oc.Arguments
	if oc.Duration > 0 {
		merged.Duration = oc.Duration
	}
	m := *other
	m.Call = &merged
	return &m
}

// sweepUnanswered forgets the calls judged without their response before
// horizon: an answer that late is too late to be judged.
func (d *dedupe) sweepUnanswered(before time.Time) {
	horizon := etimeOf(before)
	d.unanswered.sweep(horizon, func(_ uint64, l *[]judgedUnanswered) (bool, etime) {
		kept, first := keepSince(*l, horizon, func(u judgedUnanswered) etime { return u.t })
		*l = kept
		return len(kept) > 0, first
	})
}

// sweep forgets observations older than horizon.
func (d *dedupe) sweep(before time.Time) {
	horizon := etimeOf(before)
	d.byReq.sweep(horizon, func(_ uint64, q *reqSeen) (bool, etime) {
		kept, first := keepSince(q.l, horizon, func(s *seen) etime { return s.t })
		q.l = kept
		return len(kept) > 0, first
	})
	d.bySpan.sweep(horizon, func(_ uint64, s **seen) (bool, etime) {
		t := (*s).t
		return !t.Before(horizon), t
	})
}

// recentIDsKept is how many call ids the engine remembers to drop a call
// taken again: about 10 MiB.
const recentIDsKept = 200_000

// collisionsKept is how many id collisions the engine remembers to count
// each once however often it is sent again: about 400 KiB, made at the
// first collision. A collision sent again after that many others counts
// again.
const collisionsKept = 16_384

// recentIDs remembers the last ids taken, first in first out, by a 64-bit
// hash of each (a collision, one in 2^64 per pair, would drop a call). The
// hashes sit in an open-addressing table twice the size of the ring, so
// that a lookup is mostly one cache line: every call of analyze passes
// here, and a Go map of 200,000 entries, written and deleted from at each
// call, cost as much as reading the call.
type recentIDs struct {
	table []uint64 // 0 is an empty slot; hashes have their low bit set
	mask  uint64
	ring  []uint64
	next  int
}

func newRecentIDs(n int) *recentIDs {
	size := 1
	for size < 2*n {
		size *= 2
	}
	return &recentIDs{table: make([]uint64, size), mask: uint64(size - 1), ring: make([]uint64, n)}
}

// add remembers the tenant's id; it returns false when it was already
// remembered. An empty id (a call built by hand) is never a duplicate.
func (r *recentIDs) add(tenant, id string) bool {
	if id == "" {
		return true
	}
	// Ids are unique within a tenant: another tenant's call of the same
	// id is another call. The hash of the two written apart is the hash of
	// their concatenation, without making it.
	var mh maphash.Hash
	mh.SetSeed(ordSeed)
	mh.WriteString(tenant)
	mh.WriteByte(0)
	mh.WriteString(id)
	h := mh.Sum64() | 1
	i := h & r.mask
	for ; r.table[i] != 0; i = (i + 1) & r.mask {
		if r.table[i] == h {
			return false
		}
	}
	if old := r.ring[r.next]; old != 0 {
		r.remove(old)
		// The removal may have moved h's place: find it again.
		for i = h & r.mask; r.table[i] != 0; i = (i + 1) & r.mask {
		}
	}
	r.table[i] = h
	r.ring[r.next] = h
	r.next = (r.next + 1) % len(r.ring)
	return true
}

// remove drops h from the table, moving back the entries after it in its
// run that would no longer be found past the hole (linear probing's
// deletion without tombstones).
func (r *recentIDs) remove(h uint64) {
	i := h & r.mask
	for r.table[i] != h {
		if r.table[i] == 0 {
			return
		}
		i = (i + 1) & r.mask
	}
	for {
		r.table[i] = 0
		j := i
		for {
			j = (j + 1) & r.mask
			if r.table[j] == 0 {
				return
			}
			// The entry at j may fill the hole at i unless its home slot
			// lies cyclically in (i, j].
			home := r.table[j] & r.mask
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				r.table[i] = r.table[j]
				i = j
				break
			}
		}
	}
}
