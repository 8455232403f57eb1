package store

import (
	"cmp"
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/valyala/fastjson"
)

// Page sizes: a query's Limit is clamped to them, and zero takes the
// default.
const (
	// DefaultPage and MaxPage bound a page of findings, writes or calls.
	DefaultPage = 100
	MaxPage     = 1000
	// DefaultTimeline and MaxTimeline bound a document's timeline.
	DefaultTimeline = 1000
	MaxTimeline     = 10000
)

// PageLimit clamps the Limit of a page query.
func PageLimit(n int) int { return clamp(n, DefaultPage, MaxPage) }

// TimelineLimit clamps the Limit of a timeline query.
func TimelineLimit(n int) int { return clamp(n, DefaultTimeline, MaxTimeline) }

func clamp(n, def, max int) int {
	switch {
	case n <= 0:
		return def
	case n > max:
		return max
	}
	return n
}

// CallEvent is the timeline event of a call, from the fields every store
// keeps in the open: its outcome and the classification of its failure.
func CallEvent(c *audit.Call, outcome audit.Outcome, failure *audit.Failure) audit.TimelineEvent {
	ev := audit.TimelineEvent{Time: c.Time, Type: audit.EventCall, CallID: c.ID, Server: c.Server, Tenant: c.Tenant,
		Session: c.Session, Tool: c.Tool, Outcome: outcome, Source: c.Source}
	if failure != nil {
		ev.Code, ev.RetryAction = failure.Code, failure.Action
	}
	return ev
}

// TimelineCallEvent is the event of call c in document doc's timeline:
// its CallEvent with what its payloads say of doc's revision and hash
// before and after it (dialect.RevisionsOf, as the page shows them). A
// call on several documents says different things of each, so the
// calls listing (CallEvent) leaves them out.
func TimelineCallEvent(c *audit.Call, outcome audit.Outcome, failure *audit.Failure, doc string) audit.TimelineEvent {
	ev := CallEvent(c, outcome, failure)
	rv := dialect.RevisionsOf(c, doc)
	ev.RevisionBefore, ev.RevisionAfter, ev.HashBefore, ev.HashAfter = rv.Before, rv.After, rv.HashBefore, rv.HashAfter
	return ev
}

// WriteEvent is the timeline event of a write attempt in its current
// state, at the time of its call.
func WriteEvent(w *audit.Write) audit.TimelineEvent {
	return audit.TimelineEvent{Time: w.Time, Type: audit.EventWrite, CallID: w.CallID, Server: w.Server, Tenant: w.Tenant,
		Session: w.Session, Tool: w.Tool, Key: w.Key, State: w.State, Reason: w.Reason, RetryAction: w.Action}
}

// FindingEvent is the timeline event of a finding; it holds f.
func FindingEvent(f *audit.Finding) audit.TimelineEvent {
	return audit.TimelineEvent{Time: f.Time, Type: audit.EventFinding, Server: f.Server, Tenant: f.Tenant, Session: f.Session,
		Key: f.Key, Reason: f.Reason, RetryAction: f.RetryAction, Finding: f}
}

// eventRank orders events of equal time: calls, then writes, then
// findings.
var eventRank = map[string]int{audit.EventCall: 0, audit.EventWrite: 1, audit.EventFinding: 2}

// CutTimeline puts a timeline's events in time order (calls first, then
// writes, then findings at equal times; otherwise as given), keeps the
// first limit and says where the rest begin. leftOut holds, for each part
// a store read only in part (calls past the limit, findings past the last
// call kept), the earliest time it may have left out: every event of that
// part before it is among events. NextSince is the earliest of those and
// of the first event cut here, so that nothing before it is missing.
func CutTimeline(events []audit.TimelineEvent, limit int, leftOut ...time.Time) audit.TimelinePage {
	slices.SortStableFunc(events, func(a, b audit.TimelineEvent) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(eventRank[a.Type], eventRank[b.Type]))
	})
	if len(events) > limit {
		leftOut = append(leftOut, events[limit].Time)
		events = events[:limit]
	}
	page := audit.TimelinePage{Events: events}
	for i, t := range leftOut {
		if i == 0 || t.Before(page.NextSince) {
			page.NextSince = t
		}
		page.Truncated = true
	}
	return page
}

// Fingerprint derives a call's fingerprint from its request, as every
// carrier does (audit.Fingerprint over the canonical arguments). A store
// keeps a mark instead of the 16 incompressible bytes when the call's
// fingerprint is this one (Derived), and derives it again on reading.
func Fingerprint(c *audit.Call) string {
	return audit.Fingerprint(c.Server, c.Session, c.RPCID, c.Tool, canonicalArgs(c.Arguments))
}

// parsers serves canonicalArgs: a parser of its own per call allocated
// more than the rest of a stored row, on the acknowledgement's path.
var parsers fastjson.ParserPool

// canonicalArgs returns canon.Bytes(raw), without building a parse tree
// when raw is valid JSON already in its canonical form, as arguments
// written by most encoders are (canon.Canonical may only judge JSON).
func canonicalArgs(raw []byte) []byte {
	if len(raw) == 0 {
		return nil
	}
	if fastjson.ValidateBytes(raw) == nil && canon.Canonical(raw) {
		return raw
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(raw)
	if err != nil {
		return raw
	}
	return canon.Append(nil, v)
}

// Derived reports whether c's fingerprint is the one Fingerprint derives,
// so that a store may keep a mark instead of it.
func Derived(c *audit.Call) bool {
	if c.Fingerprint == "" {
		return false
	}
	// Compared where it is made: no string is allocated for it.
	var out [32]byte
	return string(audit.AppendFingerprint(out[:0], c.Server, c.Session, c.RPCID, c.Tool, canonicalArgs(c.Arguments))) == c.Fingerprint
}
