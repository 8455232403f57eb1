package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// T0 is the start of the suite's event time.
var T0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// Run runs the conformance suite. open returns a new, empty store for each
// subtest; it registers its own cleanup (such as removing files). The suite
// closes every store it opened, possibly after the subtest closed it
// already, so a second Close must not panic.
//
// Expectations beyond the comments of audit.Store, which every backend must
// meet as well: times come back in UTC to the nanosecond; a Timeline shows
// each write at its Time with its current state, and finds a document's
// writes through its stored calls; timeline events of equal time come calls
// first, then writes, then findings.
func Run(t *testing.T, open func(t *testing.T) audit.Store) {
	newStore := func(t *testing.T) audit.Store {
		t.Helper()
		s := open(t)
		t.Cleanup(func() { s.Close() })
		return s
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s audit.Store)
	}{
		{"AppendCalls/round_trip", testRoundTrip},
		{"AppendCalls/idempotent", testIdempotent},
		{"AppendCalls/concurrent", testConcurrentAppend},
		{"AppendCalls/tenant_scoped", testTenantScoped},
		{"AppendCalls/responses", testResponses},
		{"AppendCalls/answer_completes", testAnswerCompletes},
		{"AppendCalls/answer_aside", testAnswerAside},
		{"ScanCalls/since_and_order", testScanSince},
		{"ScanCalls/stops_on_error", testScanError},
		{"Commit/watermark", testWatermark},
		{"Commit/atomic", testCommitAtomic},
		{"Commit/write_upsert", testWriteUpsert},
		{"Commit/finding_once", testFindingOnce},
		{"Commit/too_late", testTooLate},
		{"FindingIDs", testFindingIDs},
		{"NewestFindings", testNewestFindings},
		{"Findings/filters", testFindingFilters},
		{"Findings/pages", testFindingPages},
		{"Findings/bad_cursor", testFindingBadCursor},
		{"Writes/filters_and_pages", testWritePages},
		{"Timeline", testTimeline},
		{"Timeline/truncated", testTimelineTruncated},
		{"WriteCounts", testWriteCounts},
		{"WriteCountsByRange", testWriteCountsByRange},
		{"BadWriteCounts", testBadWriteCounts},
		{"DeleteBefore", testDeleteBefore},
		{"DeleteBefore/tenants", testDeleteTenants},
		{"Close", testClose},
		{"Capture", testCapture},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
	for _, tc := range investigatorTests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore(t)) })
	}
}

// ctx bounds every call of the suite.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// at returns T0 plus s seconds and a few nanoseconds, to check precision.
func at(s int) time.Time { return T0.Add(time.Duration(s)*time.Second + 123) }

// id returns the stable id of call i, in the form audit.StableID gives.
func id(i int) string { return fmt.Sprintf("c_%020x", i) }

// rec returns a complete call record: every field of the call is set.
func rec(i int, sec int, docs ...string) audit.Record {
	c := &audit.Call{
		ID:        id(i),
		Time:      at(sec),
		Duration:  time.Duration(i)*time.Millisecond + 7,
		Server:    "thegram",
		Session:   fmt.Sprintf("s-%d", i%3),
		Client:    "claude",
		Tenant:    "acme",
		TraceID:   fmt.Sprintf("%032x", i+1),
		SpanID:    fmt.Sprintf("%016x", i+1),
		RPCID:     fmt.Sprint(i),
		Method:    "tools/call",
		Tool:      "gram_patch",
		Arguments: []byte(fmt.Sprintf(`{"path": "%s", "n":%d }`, first(docs), i)),
		Responded: true,
		Result:    []byte(fmt.Sprintf(`{"isError":false,"structuredContent":{"rev":%d}}`, i)),
		Source:    fmt.Sprintf("capture.ndjson:%d", i),
	}
	c.Fingerprint = audit.Fingerprint(c.Server, c.Session, c.RPCID, c.Tool, canon.Bytes(c.Arguments))
	r := audit.Record{Call: c, Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: c.Tool}
	for j, d := range docs {
		r.Ops = append(r.Ops, audit.Op{Seq: j, Tool: c.Tool, Kind: audit.OpRead, Target: d, Status: audit.OpSucceeded})
	}
	return r
}

func errOf[T any](_ T, err error) error { return err }

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// failed turns r into a call answered with a JSON-RPC error.
func failed(r audit.Record, code string, action audit.RetryAction) audit.Record {
	r.Call.Result = nil
	r.Call.Error = &audit.RPCError{Code: -32000, Message: code + " happened", Data: []byte(`{"code":"` + code + `"}`)}
	r.Outcome = audit.OutcomeProtocolError
	r.Failure = &audit.Failure{Code: code, Action: action, Message: code + " happened"}
	return r
}

// timedOut turns r into a call that got no response.
func timedOut(r audit.Record) audit.Record {
	r.Call.Responded = false
	r.Call.Result = nil
	r.Call.TransportError = "timeout"
	r.Outcome = audit.OutcomeNoResponse
	r.Failure = &audit.Failure{Code: "timeout", Action: audit.ActionVerifyThenDecide}
	return r
}

func write(callID string, seq int, sec int, state audit.WriteState, doc string) audit.Write {
	return audit.Write{
		CallID: callID, Seq: seq, Time: at(sec), Server: "thegram", Tenant: "acme", Session: "s-1",
		Tool: "gram_patch", Document: doc, Key: "req-" + callID, State: state, StateTime: at(sec + 1),
	}
}

func finding(kind audit.Kind, sec int, doc string, calls ...string) audit.Finding {
	return audit.Finding{
		Kind: kind, Severity: kind.Severity(), Server: "thegram", Tenant: "acme", Document: doc,
		Key: "req-1", Session: "s-1", Time: at(sec), Calls: calls,
		Summary: fmt.Sprintf("%s on %s at %d.", kind, doc, sec),
	}
}

func appendCalls(t *testing.T, s audit.Store, recs ...audit.Record) int {
	t.Helper()
	n, err := s.AppendCalls(ctx(t), recs)
	if err != nil {
		t.Fatalf("AppendCalls: %v", err)
	}
	return n
}

func commit(t *testing.T, s audit.Store, r audit.Results) {
	t.Helper()
	if err := s.Commit(ctx(t), r); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func scan(t *testing.T, s audit.Store, since time.Time) []*audit.Call {
	t.Helper()
	var got []*audit.Call
	if err := s.ScanCalls(ctx(t), since, func(r *audit.Record) error {
		got = append(got, r.Call)
		return nil
	}); err != nil {
		t.Fatalf("ScanCalls: %v", err)
	}
	return got
}

func calls(recs []audit.Record) []*audit.Call {
	out := make([]*audit.Call, len(recs))
	for i := range recs {
		out[i] = recs[i].Call
	}
	return out
}

func sortCalls(cs []*audit.Call) {
	slices.SortStableFunc(cs, func(a, b *audit.Call) int { return a.Time.Compare(b.Time) })
}

func diffCalls(t *testing.T, got, want []*audit.Call) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d calls, want %d: %v", len(got), len(want), callIDs(got))
	}
	for i := range want {
		// The response's sum is not stored (audit.Call.RespSum): a call
		// read back has none.
		w := *want[i]
		w.RespSum = 0
		if !reflect.DeepEqual(got[i], &w) {
			t.Errorf("call %d:\n got %+v\nwant %+v", i, *got[i], w)
		}
	}
}

func callIDs(cs []*audit.Call) []string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

func testRoundTrip(t *testing.T, s audit.Store) {
	recs := []audit.Record{
		rec(1, 1, "a.gram"),
		failed(rec(2, 2, "a.gram"), "E_STORAGE", audit.ActionVerifyThenDecide),
		timedOut(rec(3, 3, "b.gram")),
		rec(4, 4),
	}
	// Arguments and results are kept byte for byte, odd spacing included.
	recs[0].Call.Arguments = []byte("{ \"path\" :\"a.gram\",\n\t\"ops\": [1, 2.50, \"\\u00e9\"] }")
	// Absent arguments, a text JSON-RPC id, ids and trace ids of other forms.
	recs[3].Call.Arguments = nil
	recs[3].Call.RPCID = "abc-7"
	recs[3].Call.ID = "otlp-7f3a"
	recs[3].Call.TraceID = "NOT-HEX"
	recs[3].Call.SpanID = ""
	recs[3].Call.Session = ""
	recs[3].Call.Client = ""
	recs[3].Call.Tenant = ""
	recs[3].Call.Method = "tools/list"
	recs[3].Call.Tool = ""
	// An error without data.
	recs[1].Call.Error.Data = nil
	// Fingerprints: none, and one not derived from the request.
	recs[2].Call.Fingerprint = ""
	recs[3].Call.Fingerprint = "\x00\xffnot derived"
	// A reading with an operation of every kind of field.
	recs[1].Ops = append(recs[1].Ops, audit.Op{Seq: 7, Tool: "organizations.applyDocumentCopy", Kind: audit.OpWrite,
		Target: "doc_2", Key: "op-1", KeyKind: "operationId", Intent: "i", Binding: "b", Identity: "id", KeyProtected: true,
		Status: audit.OpUncertain, Failure: recs[1].Failure, Reason: audit.ReasonInFlightUnknown, HasBaseRev: true, BaseRev: -3,
		Rev: 9, Sync: "pending", SaveState: "saved", Replayed: true, Action: "created", DocumentID: "doc_9",
		JournalCorrupt: true, CopyState: "applying", NextAction: "wait_then_retry_apply", RetryAfter: at(60)},
		audit.Op{Seq: 8, Tool: "documents.editDocument", Kind: audit.OpWrite, Status: audit.OpFailed,
			Failure: &audit.Failure{Code: "stale_live_revision", Action: audit.ActionRereadAndRebase}})
	recs[1].RequestHash = "0123456789abcdef01234567"
	appendCalls(t, s, recs...)
	var got []*audit.Record
	if err := s.ScanCalls(ctx(t), time.Time{}, func(r *audit.Record) error {
		got = append(got, r)
		return nil
	}); err != nil {
		t.Fatalf("ScanCalls: %v", err)
	}
	gotCalls := make([]*audit.Call, len(got))
	for i, r := range got {
		gotCalls[i] = r.Call
	}
	diffCalls(t, gotCalls, calls(recs))
	// The reading comes back as it went in: read once, never again.
	for i := range got {
		want := recs[i]
		if !reflect.DeepEqual(got[i].Ops, want.Ops) || got[i].Outcome != want.Outcome || got[i].Tool != want.Tool ||
			got[i].Dialect != want.Dialect || got[i].RequestHash != want.RequestHash || !reflect.DeepEqual(got[i].Failure, want.Failure) {
			t.Errorf("reading of call %d:\n got %+v\nwant %+v", i, *got[i], want)
		}
	}
	if got[1].Ops[1].Failure != got[1].Failure {
		t.Errorf("an operation no longer shares its call's failure")
	}
}

func testIdempotent(t *testing.T, s audit.Store) {
	recs := []audit.Record{rec(1, 1, "a.gram"), rec(2, 2, "a.gram"), rec(3, 3, "a.gram")}
	if n := appendCalls(t, s, recs...); n != 3 {
		t.Fatalf("AppendCalls of 3 new calls = %d", n)
	}
	// A store tells the calls it had already, or counts them all.
	if n := appendCalls(t, s, recs...); n != 0 && n != 3 {
		t.Fatalf("AppendCalls of 3 stored calls = %d, want 0 (or 3 from a store that cannot tell)", n)
	}
	// A retried batch overlapping stored calls, with a duplicate inside it.
	appendCalls(t, s, recs[2], rec(4, 4, "a.gram"), rec(4, 4, "a.gram"), recs[0])
	want := append(calls(recs), rec(4, 4, "a.gram").Call)
	diffCalls(t, scan(t, s, time.Time{}), want)
	// Stored once in the timeline too.
	events, err := eventsOf(s.Timeline(ctx(t), audit.TimelineQuery{Document: "a.gram"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 4 {
		t.Fatalf("timeline has %d events, want 4: %+v", len(events), events)
	}
}

func testConcurrentAppend(t *testing.T, s audit.Store) {
	const workers, batches, size = 8, 10, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*batches)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				var recs []audit.Record
				for i := range size {
					// Workers overlap by half: each call is sent twice.
					n := ((w/2)*batches+b)*size + i
					recs = append(recs, rec(n, n, fmt.Sprintf("doc-%d", n%7)))
				}
				if _, err := s.AppendCalls(context.Background(), recs); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("AppendCalls: %v", err)
	}
	got := scan(t, s, time.Time{})
	if want := workers / 2 * batches * size; len(got) != want {
		t.Fatalf("stored %d calls, want %d", len(got), want)
	}
	for i, c := range got {
		if c.ID != id(i) {
			t.Fatalf("call %d is %s, want %s", i, c.ID, id(i))
		}
	}
}

func testScanSince(t *testing.T, s audit.Store) {
	// Appended out of time order, and in several batches.
	recs := []audit.Record{rec(5, 50), rec(1, 10), rec(3, 30), rec(2, 20), rec(4, 40), rec(6, 30)}
	appendCalls(t, s, recs[:3]...)
	appendCalls(t, s, recs[3:]...)
	want := calls(recs)
	sortCalls(want)
	got := scan(t, s, time.Time{})
	// Calls of equal time (3 and 6) may come in either order.
	slices.SortStableFunc(got, func(a, b *audit.Call) int { return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID, b.ID)) })
	slices.SortStableFunc(want, func(a, b *audit.Call) int { return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID, b.ID)) })
	diffCalls(t, got, want)
	for i := 1; i < len(got); i++ {
		if got[i].Time.Before(got[i-1].Time) {
			t.Fatalf("ScanCalls out of time order")
		}
	}
	// since is inclusive, to the nanosecond.
	since := scan(t, s, at(30))
	if ids := callIDs(since); len(ids) != 4 || ids[2] != id(4) || ids[3] != id(5) {
		t.Fatalf("ScanCalls(since 30s) = %v, want calls 3 and 6, then 4, 5", ids)
	}
	if got := scan(t, s, at(30).Add(1)); len(got) != 2 {
		t.Fatalf("ScanCalls(since 30s+1ns) = %v, want calls 4, 5", callIDs(got))
	}
}

func testScanError(t *testing.T, s audit.Store) {
	appendCalls(t, s, rec(1, 1), rec(2, 2), rec(3, 3))
	stop := errors.New("stop")
	n := 0
	err := s.ScanCalls(ctx(t), time.Time{}, func(*audit.Record) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("ScanCalls = %v after %d calls, want the error of fn after 1", err, n)
	}
}

func testWatermark(t *testing.T, s audit.Store) {
	wm := func() time.Time {
		t.Helper()
		got, err := s.Watermark(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := wm(); !got.IsZero() {
		t.Fatalf("Watermark of a new store = %v, want zero", got)
	}
	commit(t, s, audit.Results{Watermark: at(10)})
	if got := wm(); !got.Equal(at(10)) {
		t.Fatalf("Watermark = %v, want %v", got, at(10))
	}
	// A zero watermark leaves it unchanged.
	commit(t, s, audit.Results{Writes: []audit.Write{write(id(1), 0, 1, audit.StateDurable, "a.gram")}})
	if got := wm(); !got.Equal(at(10)) {
		t.Fatalf("Watermark after a commit without one = %v, want %v", got, at(10))
	}
	commit(t, s, audit.Results{Watermark: at(20)})
	if got := wm(); !got.Equal(at(20)) || got.Location() != time.UTC {
		t.Fatalf("Watermark = %v, want %v in UTC", got, at(20))
	}
}

// testCommitAtomic checks that a reader never sees a commit's findings
// without its watermark, nor its watermark without its findings and writes.
func testCommitAtomic(t *testing.T, s audit.Store) {
	const commits = 40
	done := make(chan struct{})
	var wg sync.WaitGroup
	var readerErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := context.Background()
		for {
			select {
			case <-done:
				return
			default:
			}
			// Findings first: the watermark read later is at least theirs.
			ids, err := s.FindingIDs(c, time.Time{})
			if err != nil {
				readerErr = err
				return
			}
			wm, err := s.Watermark(c)
			if err != nil {
				readerErr = err
				return
			}
			for i := range commits {
				f := finding(audit.KindUnsafeRetry, i, "a.gram", id(i))
				if ids[f.ID()] && wm.Before(at(i)) {
					readerErr = fmt.Errorf("finding of commit %d visible with watermark %v", i, wm)
					return
				}
			}
			// Watermark first: everything committed with it is visible.
			wm, err = s.Watermark(c)
			if err != nil {
				readerErr = err
				return
			}
			counts, err := s.WriteCounts(c, audit.CountQuery{})
			if err != nil {
				readerErr = err
				return
			}
			ids, err = s.FindingIDs(c, time.Time{})
			if err != nil {
				readerErr = err
				return
			}
			if !wm.IsZero() {
				n := int(wm.Sub(T0)/time.Second) + 1
				if len(ids) < n || counts[audit.StateDurable] < int64(n) {
					readerErr = fmt.Errorf("watermark %v visible with %d findings and %d writes, want %d", wm, len(ids), counts[audit.StateDurable], n)
					return
				}
			}
		}
	}()
	for i := range commits {
		commit(t, s, audit.Results{
			Writes:    []audit.Write{write(id(i), 0, i, audit.StateDurable, "a.gram")},
			Findings:  []audit.Finding{finding(audit.KindUnsafeRetry, i, "a.gram", id(i))},
			Watermark: at(i),
		})
	}
	close(done)
	wg.Wait()
	if readerErr != nil {
		t.Fatal(readerErr)
	}
}

func allWrites(t *testing.T, s audit.Store, q audit.WriteQuery) []audit.Write {
	t.Helper()
	var out []audit.Write
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("Writes: no end of pages")
		}
		p, err := s.Writes(ctx(t), q)
		if err != nil {
			t.Fatalf("Writes: %v", err)
		}
		out = append(out, p.Writes...)
		if p.NextCursor == "" {
			return out
		}
		q.Cursor = p.NextCursor
	}
}

func allFindings(t *testing.T, s audit.Store, q audit.FindingQuery) []audit.Finding {
	t.Helper()
	var out []audit.Finding
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("Findings: no end of pages")
		}
		p, err := s.Findings(ctx(t), q)
		if err != nil {
			t.Fatalf("Findings: %v", err)
		}
		if q.Limit > 0 && len(p.Findings) > q.Limit {
			t.Fatalf("Findings returned %d, more than the limit %d", len(p.Findings), q.Limit)
		}
		out = append(out, p.Findings...)
		if p.NextCursor == "" {
			return out
		}
		q.Cursor = p.NextCursor
	}
}

func testWriteUpsert(t *testing.T, s audit.Store) {
	pending := write(id(1), 0, 1, audit.StatePending, "a.gram")
	pending.Reason = audit.ReasonCommitUnknown
	pending.Action = audit.ActionReplaySameRequest
	other := write(id(1), 1, 1, audit.StateRejected, "b.gram")
	commit(t, s, audit.Results{Writes: []audit.Write{pending, other}})
	unverified := pending
	unverified.State = audit.StateUnverified
	unverified.StateTime = at(301)
	commit(t, s, audit.Results{Writes: []audit.Write{unverified}})
	// Within one Results, the later state wins too.
	resolved := unverified
	resolved.State, resolved.Reason, resolved.StateTime = audit.StateResolved, "", at(302)
	durable := other
	durable.State = audit.StateDurable
	commit(t, s, audit.Results{Writes: []audit.Write{durable, resolved, other}})

	got := allWrites(t, s, audit.WriteQuery{})
	slices.SortFunc(got, func(a, b audit.Write) int { return cmp.Compare(a.Seq, b.Seq) })
	want := []audit.Write{resolved, other}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Writes =\n %+v\nwant\n %+v", got, want)
	}
}

func testFindingOnce(t *testing.T, s audit.Store) {
	f := finding(audit.KindDoubleAppliedWrite, 5, "a.gram", id(1), id(2))
	f.RetryAction = audit.ActionRereadAndRebase
	g := finding(audit.KindUnverifiedWrite, 6, "a.gram", id(3))
	g.Reason = audit.ReasonNoResponse
	g.Key, g.Session, g.Tenant = "", "", ""
	commit(t, s, audit.Results{Findings: []audit.Finding{f, g, f}})
	// The same evidence again, with another summary: still the first one.
	again := f
	again.Summary = "re-derived after a restart"
	commit(t, s, audit.Results{Findings: []audit.Finding{again}})
	got := allFindings(t, s, audit.FindingQuery{})
	if want := []audit.Finding{f, g}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Findings =\n %+v\nwant\n %+v", got, want)
	}
}

func testFindingIDs(t *testing.T, s audit.Store) {
	fs := []audit.Finding{
		finding(audit.KindUnsafeRetry, 1, "a.gram", id(1)),
		finding(audit.KindUnsafeRetry, 2, "a.gram", id(2)),
		finding(audit.KindUnsafeRetry, 3, "a.gram", id(3)),
	}
	commit(t, s, audit.Results{Findings: fs})
	got, err := s.FindingIDs(ctx(t), at(2))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{fs[1].ID(): true, fs[2].ID(): true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("FindingIDs(since 2s) = %v, want %v", got, want)
	}
	if all, err := s.FindingIDs(ctx(t), time.Time{}); err != nil || len(all) != 3 {
		t.Fatalf("FindingIDs(zero) = %v, %v; want 3 ids", all, err)
	}
}

// testNewestFindings: the newest finding time of each server and kind,
// over every tenant and lifecycle state (a withdrawn one included), newest
// first and cut at the limit; the nanoseconds are kept (op21's D6: serve
// seeds the last finding gauge with it at start).
func testNewestFindings(t *testing.T, s audit.Store) {
	nf, ok := s.(audit.NewestFinder)
	if !ok {
		t.Fatalf("%T does not implement audit.NewestFinder", s)
	}
	if got, err := nf.NewestFindings(ctx(t), 0); err != nil || len(got) != 0 {
		t.Fatalf("NewestFindings of an empty store = %v, %v; want none", got, err)
	}
	mk := func(kind audit.Kind, server, tenant string, sec int, n int) audit.Finding {
		f := finding(kind, sec, "a.gram", id(n))
		f.Server, f.Tenant = server, tenant
		f.Time = f.Time.Add(123456789 * time.Nanosecond)
		return f
	}
	fs := []audit.Finding{
		mk(audit.KindDoubleAppliedWrite, "thegram", "acme", 5, 1),
		mk(audit.KindDoubleAppliedWrite, "thegram", "globex", 9, 2), // newer, another tenant
		mk(audit.KindDoubleAppliedWrite, "thegram", "acme", 2, 3),
		mk(audit.KindUnverifiedWrite, "thegram", "acme", 7, 4),
		mk(audit.KindDoubleAppliedWrite, "oddlynew", "", 3, 5),
	}
	commit(t, s, audit.Results{Findings: fs})
	if _, err := s.ChangeFinding(ctx(t), audit.FindingChange{FindingID: fs[3].ID(), Tenant: "acme", State: audit.FindingWithdrawn, By: "mcpaudit", Note: "late call", Time: at(20)}); err != nil {
		t.Fatal(err)
	}
	want := []audit.FindingTime{
		{Server: "thegram", Kind: audit.KindDoubleAppliedWrite, Time: fs[1].Time},
		{Server: "thegram", Kind: audit.KindUnverifiedWrite, Time: fs[3].Time},
		{Server: "oddlynew", Kind: audit.KindDoubleAppliedWrite, Time: fs[4].Time},
	}
	got, err := nf.NewestFindings(ctx(t), 0)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("NewestFindings(0) = %v, %v; want %v", got, err, want)
	}
	if got, err := nf.NewestFindings(ctx(t), 2); err != nil || !reflect.DeepEqual(got, want[:2]) {
		t.Fatalf("NewestFindings(2) = %v, %v; want %v", got, err, want[:2])
	}
}

// findingSet is varied on every field a query filters on.
func findingSet() []audit.Finding {
	var fs []audit.Finding
	for i := range 24 {
		k := audit.Kinds[i%len(audit.Kinds)]
		f := finding(k, i/2, fmt.Sprintf("doc-%d.gram", i%3), id(i))
		f.Server = []string{"thegram", "oddlynew"}[i%2]
		f.Tenant = []string{"acme", "", "globex"}[i%3]
		f.Key = []string{"req-1", "req-2", "", "op-9"}[i%4]
		f.Session = []string{"s-1", "s-2", ""}[i%3]
		if i%5 == 0 {
			f.Document = ""
		}
		fs = append(fs, f)
	}
	return fs
}

func sortFindings(fs []audit.Finding) {
	slices.SortStableFunc(fs, func(a, b audit.Finding) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID(), b.ID()))
	})
}

func testFindingFilters(t *testing.T, s audit.Store) {
	fs := findingSet()
	commit(t, s, audit.Results{Findings: fs})
	sortFindings(fs)
	match := func(q audit.FindingQuery, f audit.Finding) bool {
		return (q.Kind == "" || f.Kind == q.Kind) &&
			(q.Severity == "" || f.Severity.Rank() >= q.Severity.Rank()) &&
			(q.Server == "" || f.Server == q.Server) &&
			(q.Tenant == "" || f.Tenant == q.Tenant) &&
			(q.Document == "" || f.Document == q.Document) &&
			(q.Key == "" || f.Key == q.Key) &&
			(q.Session == "" || f.Session == q.Session) &&
			(q.Since.IsZero() || !f.Time.Before(q.Since)) &&
			(q.Until.IsZero() || f.Time.Before(q.Until))
	}
	f := func(name string, q audit.FindingQuery) {
		t.Helper()
		var want []audit.Finding
		for _, x := range fs {
			if match(q, x) {
				want = append(want, x)
			}
		}
		if len(want) == 0 {
			t.Fatalf("%s: the query matches nothing: a useless case", name)
		}
		got := allFindings(t, s, q)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %d findings, want %d:\n got %v\nwant %v", name, len(got), len(want), findingIDs(got), findingIDs(want))
		}
	}
	f("all", audit.FindingQuery{})
	f("kind", audit.FindingQuery{Kind: audit.KindUnverifiedWrite})
	f("severity warning", audit.FindingQuery{Severity: audit.SeverityWarning})
	f("severity critical", audit.FindingQuery{Severity: audit.SeverityCritical})
	f("server", audit.FindingQuery{Server: "oddlynew"})
	f("tenant", audit.FindingQuery{Tenant: "globex"})
	f("document", audit.FindingQuery{Document: "doc-1.gram"})
	f("key", audit.FindingQuery{Key: "req-2"})
	f("session", audit.FindingQuery{Session: "s-2"})
	f("since", audit.FindingQuery{Since: at(5)})
	f("until", audit.FindingQuery{Until: at(5)})
	f("since until", audit.FindingQuery{Since: at(3), Until: at(8)})
	f("combined", audit.FindingQuery{Server: "thegram", Severity: audit.SeverityWarning, Since: at(1)})
	f("combined pages", audit.FindingQuery{Tenant: "acme", Limit: 2})
}

func findingIDs(fs []audit.Finding) []string {
	var ids []string
	for _, f := range fs {
		ids = append(ids, f.ID())
	}
	return ids
}

func testFindingPages(t *testing.T, s audit.Store) {
	fs := findingSet() // two findings per second: ties broken by id
	commit(t, s, audit.Results{Findings: fs})
	sortFindings(fs)
	for _, limit := range []int{1, 3, 5, 24, 100} {
		if got := allFindings(t, s, audit.FindingQuery{Limit: limit}); !reflect.DeepEqual(findingIDs(got), findingIDs(fs)) {
			t.Errorf("limit %d: pages hold %v, want %v", limit, findingIDs(got), findingIDs(fs))
		}
	}
	// Findings committed between pages, later than the page read, are on
	// the next pages: no gaps.
	p, err := s.Findings(ctx(t), audit.FindingQuery{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	late := finding(audit.KindWastedRetry, 100, "z.gram", id(99))
	commit(t, s, audit.Results{Findings: []audit.Finding{late}})
	rest := allFindings(t, s, audit.FindingQuery{Limit: 5, Cursor: p.NextCursor})
	got := append(p.Findings, rest...)
	if want := append(slices.Clone(fs), late); !reflect.DeepEqual(findingIDs(got), findingIDs(want)) {
		t.Errorf("pages with a commit between them hold %v, want %v", findingIDs(got), findingIDs(want))
	}
	// The last page has no cursor.
	p, err = s.Findings(ctx(t), audit.FindingQuery{Since: at(100)})
	if err != nil || len(p.Findings) != 1 || p.NextCursor != "" {
		t.Fatalf("last page = %+v, %v; want one finding and no cursor", p, err)
	}
}

func testFindingBadCursor(t *testing.T, s audit.Store) {
	commit(t, s, audit.Results{Findings: findingSet()})
	for _, c := range []string{"garbage!", "AAAA", "not a cursor at all"} {
		_, err := s.Findings(ctx(t), audit.FindingQuery{Cursor: c})
		if !errors.Is(err, audit.ErrBadCursor) {
			t.Errorf("Findings(cursor %q) = %v, want ErrBadCursor", c, err)
		}
		_, err = s.Writes(ctx(t), audit.WriteQuery{Cursor: c})
		if !errors.Is(err, audit.ErrBadCursor) {
			t.Errorf("Writes(cursor %q) = %v, want ErrBadCursor", c, err)
		}
	}
}

func testWritePages(t *testing.T, s audit.Store) {
	var ws []audit.Write
	for i := range 30 {
		state := audit.WriteStates[i%len(audit.WriteStates)]
		w := write(id(i), i%2, i/3, state, fmt.Sprintf("doc-%d.gram", i%4))
		w.Server = []string{"thegram", "oddlynew", "thegram"}[i%3]
		w.Tenant = []string{"acme", "globex"}[i%2]
		ws = append(ws, w)
	}
	commit(t, s, audit.Results{Writes: ws})
	match := func(q audit.WriteQuery, w audit.Write) bool {
		return (q.State == "" || w.State == q.State) &&
			(q.Server == "" || w.Server == q.Server) &&
			(q.Tenant == "" || w.Tenant == q.Tenant) &&
			(q.Document == "" || w.Document == q.Document) &&
			(q.Since.IsZero() || !w.Time.Before(q.Since)) &&
			(q.Until.IsZero() || w.Time.Before(q.Until))
	}
	key := func(w audit.Write) string { return fmt.Sprintf("%s/%d", w.CallID, w.Seq) }
	f := func(name string, q audit.WriteQuery) {
		t.Helper()
		want := map[string]audit.Write{}
		for _, w := range ws {
			if match(q, w) {
				want[key(w)] = w
			}
		}
		if len(want) == 0 {
			t.Fatalf("%s: the query matches nothing: a useless case", name)
		}
		got := allWrites(t, s, q)
		seen := map[string]bool{}
		for i, w := range got {
			if i > 0 && w.Time.Before(got[i-1].Time) {
				t.Errorf("%s: writes out of time order", name)
			}
			if seen[key(w)] {
				t.Errorf("%s: write %s returned twice", name, key(w))
			}
			seen[key(w)] = true
			if !reflect.DeepEqual(w, want[key(w)]) {
				t.Errorf("%s: got %+v, want %+v", name, w, want[key(w)])
			}
		}
		if len(seen) != len(want) {
			t.Errorf("%s: got %d writes, want %d", name, len(seen), len(want))
		}
	}
	for _, limit := range []int{0, 1, 4, 7} {
		f(fmt.Sprint("all, limit ", limit), audit.WriteQuery{Limit: limit})
		f(fmt.Sprint("state, limit ", limit), audit.WriteQuery{State: audit.StateUnverified, Limit: limit})
	}
	f("server", audit.WriteQuery{Server: "oddlynew", Limit: 3})
	f("tenant", audit.WriteQuery{Tenant: "globex", Limit: 3})
	f("document", audit.WriteQuery{Document: "doc-2.gram", Limit: 2})
	f("since until", audit.WriteQuery{Since: at(2), Until: at(6), Limit: 4})
}

// timelineView keeps what a timeline event must say; the rest (session, tool
// on findings) is left to the backend.
type timelineView struct {
	Type        string
	Time        time.Time
	CallID      string
	Outcome     audit.Outcome
	Code        string
	RetryAction audit.RetryAction
	State       audit.WriteState
	Reason      audit.Reason
	Key         string
	FindingID   string
	Source      string // a call's sender
	// What a call's payloads say of the document's revision and hash.
	Rev [4]string
}

func viewOf(events []audit.TimelineEvent) []timelineView {
	var out []timelineView
	for _, e := range events {
		v := timelineView{Type: e.Type, Time: e.Time, CallID: e.CallID, Outcome: e.Outcome, Code: e.Code, RetryAction: e.RetryAction}
		switch e.Type {
		case audit.EventCall:
			v.Source = e.Source
			v.Rev = [4]string{e.RevisionBefore, e.RevisionAfter, e.HashBefore, e.HashAfter}
		case audit.EventWrite:
			v.State, v.Reason, v.Key = e.State, e.Reason, e.Key
		case audit.EventFinding:
			v.CallID, v.RetryAction = "", ""
			if e.Finding != nil {
				v.FindingID = e.Finding.ID()
			}
		}
		out = append(out, v)
	}
	return out
}

func testTimeline(t *testing.T, s audit.Store) {
	read := rec(1, 1, "a.gram")
	read.Call.Tool, read.Tool = "gram_read", "gram_read"
	read.Call.Source = "otlp:thegram/pod-b/node-2"
	patch := timedOut(rec(2, 2, "a.gram"))
	// What the request expected of the document: shown, with no answer.
	patch.Call.Arguments = []byte(`{"path":"a.gram","base_revision":7,"expected_hash":"h7"}`)
	patch.Call.Fingerprint = audit.Fingerprint(patch.Call.Server, patch.Call.Session, patch.Call.RPCID, patch.Call.Tool, canon.Bytes(patch.Call.Arguments))
	reread := rec(3, 3, "a.gram", "b.gram")
	// An answer about the other document says nothing of this one.
	reread.Call.Result = []byte(`{"structuredContent":{"path":"b.gram","rev":3,"hash":"hb"}}`)
	elsewhere := rec(4, 4, "b.gram")
	otherServer := failed(rec(5, 5, "a.gram"), "E_ARGUMENT", audit.ActionFixInput)
	otherServer.Call.Server = "thegram-eu"
	appendCalls(t, s, otherServer, elsewhere, reread, patch, read)

	w := write(patch.Call.ID, 0, 2, audit.StateUnverified, "a.gram")
	w.Reason, w.Action = audit.ReasonNoResponse, audit.ActionVerifyThenDecide
	wb := write(elsewhere.Call.ID, 0, 4, audit.StateDurable, "b.gram")
	// A call on both documents whose write is on the other one only.
	wr := write(reread.Call.ID, 1, 3, audit.StateDurable, "b.gram")
	double := finding(audit.KindDoubleAppliedWrite, 3, "a.gram", patch.Call.ID, reread.Call.ID)
	onB := finding(audit.KindUnsafeRetry, 4, "b.gram", elsewhere.Call.ID)
	commit(t, s, audit.Results{Writes: []audit.Write{w, wb, wr}, Findings: []audit.Finding{onB, double}})

	callEv := func(r audit.Record) timelineView {
		v := timelineView{Type: audit.EventCall, Time: r.Call.Time, CallID: r.Call.ID, Outcome: r.Outcome, Source: r.Call.Source}
		if r.Failure != nil {
			v.Code, v.RetryAction = r.Failure.Code, r.Failure.Action
		}
		return v
	}
	withRev := func(v timelineView, rev ...string) timelineView {
		copy(v.Rev[:], rev)
		return v
	}
	all := []timelineView{
		withRev(callEv(read), "", "1"),
		withRev(callEv(patch), "7", "", "h7"),
		{Type: audit.EventWrite, Time: w.Time, CallID: w.CallID, State: w.State, Reason: w.Reason, Key: w.Key, RetryAction: w.Action},
		callEv(reread),
		{Type: audit.EventFinding, Time: double.Time, FindingID: double.ID()},
		callEv(otherServer),
	}
	f := func(name string, q audit.TimelineQuery, want []timelineView) {
		t.Helper()
		events, err := eventsOf(s.Timeline(ctx(t), q))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := viewOf(events); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
		for _, e := range events {
			if e.Type == audit.EventFinding && !reflect.DeepEqual(*e.Finding, double) {
				t.Errorf("%s: finding event holds %+v, want %+v", name, *e.Finding, double)
			}
			if e.Type == audit.EventCall && (e.Server == "" || e.Tool == "") {
				t.Errorf("%s: call event without server or tool: %+v", name, e)
			}
		}
	}
	f("all servers", audit.TimelineQuery{Document: "a.gram"}, all)
	f("one server", audit.TimelineQuery{Document: "a.gram", Server: "thegram"}, all[:5])
	f("since until", audit.TimelineQuery{Document: "a.gram", Since: at(2), Until: at(3)}, all[1:3])
	f("limit", audit.TimelineQuery{Document: "a.gram", Limit: 3}, all[:3])
	f("other tenant", audit.TimelineQuery{Document: "a.gram", Tenant: "globex"}, nil)
	f("unknown document", audit.TimelineQuery{Document: "nothing.gram"}, nil)
}

// testTimelineTruncated reads timelines a limit at a time: each answer
// holds the earliest events from since, says whether the range held more,
// and gives a next_since before which nothing is missing, so that reading
// on from it reaches every event.
func testTimelineTruncated(t *testing.T, s audit.Store) {
	// a.gram: calls at 1..8, writes of calls 2 and 4 at their times,
	// findings at 3 (after the call of that second), just after 6 (between
	// two calls, so that a page whose calls stop at 6 leaves it out), 9
	// and 10 (after the last call). b.gram: findings only.
	var recs []audit.Record
	for i := 1; i <= 8; i++ {
		recs = append(recs, rec(i, i, "a.gram"))
	}
	appendCalls(t, s, recs...)
	res := audit.Results{Writes: []audit.Write{
		write(id(2), 0, 2, audit.StateDurable, "a.gram"),
		write(id(4), 0, 4, audit.StateDurable, "a.gram"),
	}}
	for _, sec := range []int{3, 9, 10} {
		res.Findings = append(res.Findings, finding(audit.KindUnsafeRetry, sec, "a.gram", id(sec)))
	}
	between := finding(audit.KindUnsafeRetry, 6, "a.gram", id(61))
	between.Time = between.Time.Add(time.Millisecond)
	res.Findings = append(res.Findings, between)
	for sec := 1; sec <= 5; sec++ {
		res.Findings = append(res.Findings, finding(audit.KindUnsafeRetry, sec, "b.gram", id(sec)))
	}
	commit(t, s, res)

	for _, tc := range []struct {
		doc  string
		want int
	}{{"a.gram", 14}, {"b.gram", 5}} {
		full, err := s.Timeline(ctx(t), audit.TimelineQuery{Document: tc.doc})
		if err != nil {
			t.Fatal(err)
		}
		all := viewOf(full.Events)
		if len(all) != tc.want || full.Truncated || !full.NextSince.IsZero() {
			t.Fatalf("%s: whole timeline has %d events, truncated %v, next_since %v; want %d, false, zero",
				tc.doc, len(all), full.Truncated, full.NextSince, tc.want)
		}
		// No instant holds more than 2 events: every limit from 2 reads on.
		for limit := 2; limit <= len(all)+1; limit++ {
			var since time.Time
			seen := map[timelineView]bool{}
			for pages := 0; ; pages++ {
				if pages > len(all) {
					t.Fatalf("%s, limit %d: no end after %d pages", tc.doc, limit, pages)
				}
				page, err := s.Timeline(ctx(t), audit.TimelineQuery{Document: tc.doc, Since: since, Limit: limit})
				if err != nil {
					t.Fatal(err)
				}
				k := 0 // the first event from since
				for k < len(all) && all[k].Time.Before(since) {
					k++
				}
				rest := all[k:]
				got := viewOf(page.Events)
				if want := rest[:min(limit, len(rest))]; !reflect.DeepEqual(got, want) {
					t.Fatalf("%s, limit %d, since %v:\n got %+v\nwant %+v", tc.doc, limit, since, got, want)
				}
				if page.Truncated != (len(rest) > limit) {
					t.Fatalf("%s, limit %d, since %v: truncated %v with %d events left from since",
						tc.doc, limit, since, page.Truncated, len(rest))
				}
				for _, v := range got {
					seen[v] = true
				}
				if !page.Truncated {
					if !page.NextSince.IsZero() {
						t.Errorf("%s, limit %d: next_since %v on a whole answer", tc.doc, limit, page.NextSince)
					}
					break
				}
				// Nothing before next_since is missing, and it moves on.
				if next, last := page.NextSince, got[len(got)-1].Time; next.After(rest[limit].Time) || next.Before(last) || !next.After(since) {
					t.Fatalf("%s, limit %d, since %v: next_since %v, want in [%v, %v] and after since",
						tc.doc, limit, since, next, last, rest[limit].Time)
				}
				since = page.NextSince
			}
			for i := range all {
				if !seen[all[i]] {
					t.Errorf("%s, limit %d: event %+v never read", tc.doc, limit, all[i])
				}
			}
		}
	}
}

func testWriteCounts(t *testing.T, s audit.Store) {
	ws := []audit.Write{
		write(id(1), 0, 1, audit.StatePending, "a"),
		write(id(2), 0, 2, audit.StateDurable, "a"),
		write(id(2), 1, 2, audit.StateDurable, "a"),
		write(id(3), 0, 3, audit.StateRejected, "a"),
		write(id(4), 0, 4, audit.StateDoubleApplied, "a"),
		write(id(5), 0, 5, audit.StateDurable, "a"),
	}
	ws[5].Server = "oddlynew"
	commit(t, s, audit.Results{Writes: ws})
	// The pending write became unverified: counted once, by its new state.
	later := ws[0]
	later.State, later.StateTime = audit.StateUnverified, at(301)
	commit(t, s, audit.Results{Writes: []audit.Write{later}})
	f := func(q audit.CountQuery, want map[audit.WriteState]int64) {
		t.Helper()
		got, err := s.WriteCounts(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("WriteCounts(%+v) = %v, want %v", q, got, want)
		}
	}
	f(audit.CountQuery{}, map[audit.WriteState]int64{audit.StateUnverified: 1, audit.StateDurable: 3, audit.StateRejected: 1, audit.StateDoubleApplied: 1})
	f(audit.CountQuery{Since: at(2), Until: at(4)}, map[audit.WriteState]int64{audit.StateDurable: 2, audit.StateRejected: 1})
	f(audit.CountQuery{Server: "oddlynew"}, map[audit.WriteState]int64{audit.StateDurable: 1})
	f(audit.CountQuery{Tenant: "nobody"}, map[audit.WriteState]int64{})
}

func testDeleteBefore(t *testing.T, s audit.Store) {
	var recs []audit.Record
	var ws []audit.Write
	var fs []audit.Finding
	for i := range 10 {
		recs = append(recs, rec(i, i*10, "a.gram"))
		ws = append(ws, write(id(i), 0, i*10, audit.StateDurable, "a.gram"))
		fs = append(fs, finding(audit.KindUnsafeRetry, i*10, "a.gram", id(i)))
	}
	appendCalls(t, s, recs...)
	commit(t, s, audit.Results{Writes: ws, Findings: fs, Watermark: at(90)})
	if n, err := s.DeleteBefore(ctx(t), time.Time{}); err != nil || n != 0 {
		t.Fatalf("DeleteBefore(zero) = %d, %v; want nothing deleted", n, err)
	}
	// at(40) itself stays: only what is strictly older goes.
	n, err := s.DeleteBefore(ctx(t), at(40))
	if err != nil {
		t.Fatal(err)
	}
	if n != 12 {
		t.Errorf("DeleteBefore deleted %d rows, want 12 (4 calls, 4 writes, 4 findings)", n)
	}
	diffCalls(t, scan(t, s, time.Time{}), calls(recs[4:]))
	if got := allWrites(t, s, audit.WriteQuery{}); !reflect.DeepEqual(got, ws[4:]) {
		t.Errorf("writes left: %+v, want %+v", got, ws[4:])
	}
	if got := allFindings(t, s, audit.FindingQuery{}); !reflect.DeepEqual(findingIDs(got), findingIDs(fs[4:])) {
		t.Errorf("findings left: %v, want %v", findingIDs(got), findingIDs(fs[4:]))
	}
	events, err := eventsOf(s.Timeline(ctx(t), audit.TimelineQuery{Document: "a.gram"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 18 || !events[0].Time.Equal(at(40)) {
		t.Errorf("timeline after retention has %d events from %v, want 18 from %v", len(events), events[0].Time, at(40))
	}
	if ids, err := s.FindingIDs(ctx(t), time.Time{}); err != nil || len(ids) != 6 {
		t.Errorf("FindingIDs after retention = %d ids, %v; want 6", len(ids), err)
	}
	if wm, err := s.Watermark(ctx(t)); err != nil || !wm.Equal(at(90)) {
		t.Errorf("Watermark after retention = %v, %v; want it kept", wm, err)
	}
	// Everything else goes too, and a second pass finds nothing.
	if n, err := s.DeleteBefore(ctx(t), at(1000)); err != nil || n != 18 {
		t.Errorf("DeleteBefore(all) = %d, %v; want 18", n, err)
	}
	if n, err := s.DeleteBefore(ctx(t), at(1000)); err != nil || n != 0 {
		t.Errorf("DeleteBefore again = %d, %v; want 0", n, err)
	}
}

func testClose(t *testing.T, s audit.Store) {
	appendCalls(t, s, rec(1, 1, "a.gram"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c := ctx(t)
	for name, err := range map[string]error{
		"AppendCalls":  errOf(s.AppendCalls(c, []audit.Record{rec(2, 2)})),
		"Commit":       s.Commit(c, audit.Results{Watermark: at(1)}),
		"Watermark":    second(s.Watermark(c)),
		"ScanCalls":    s.ScanCalls(c, time.Time{}, func(*audit.Record) error { return nil }),
		"FindingIDs":   second(s.FindingIDs(c, time.Time{})),
		"Findings":     second(s.Findings(c, audit.FindingQuery{})),
		"Writes":       second(s.Writes(c, audit.WriteQuery{})),
		"Timeline":     second(s.Timeline(c, audit.TimelineQuery{Document: "a.gram"})),
		"WriteCounts":  second(s.WriteCounts(c, audit.CountQuery{})),
		"DeleteBefore": second(s.DeleteBefore(c, at(10))),
	} {
		if !errors.Is(err, audit.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// eventsOf is the events of a timeline page, for the tests that check
// events only.
func eventsOf(p audit.TimelinePage, err error) ([]audit.TimelineEvent, error) { return p.Events, err }
