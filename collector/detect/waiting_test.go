package detect

import (
	"bytes"

	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"reflect"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestPackRecord packs and unpacks the lean record of every call of a
// generated capture (both servers, failures, noise) and of hand-made
// edge cases, and expects the record back: the same texts, numbers,
// instants, failures and operations.
func TestPackRecord(t *testing.T) {
	c := capgen.Generate(capgen.Config{Seed: 5, Sessions: 600, Span: 10 * time.Minute, AnomalyRate: 0.5, NoiseRate: 0.05})
	var recs []*audit.Record
	for _, r := range readAll(t, c.Lines) {
		l := r.Lean()
		l.Call.Received = time.Unix(0, 1_790_000_000_123_456_789)
		recs = append(recs, l)
	}
	when := time.Date(1969, 7, 20, 20, 17, 40, 5, time.FixedZone("x", 3600))
	f := &audit.Failure{Code: "timeout", Action: audit.ActionVerifyThenDecide, Message: "no answer"}
	recs = append(recs,
		&audit.Record{Call: &audit.Call{}},
		&audit.Record{Call: &audit.Call{ID: "c1", Time: when, Duration: -time.Second, Responded: true}, Failure: f, Ops: []audit.Op{
			{Seq: 3, Kind: audit.OpWrite, Target: "a.gram", Intent: "AB", Failure: f, RetryAfter: when, BaseRev: -2, HasBaseRev: true},
			{Kind: audit.OpRead, Failure: &audit.Failure{Code: "E"}, JournalCorrupt: true},
		}})
	packed := 0
	for i, r := range recs {
		if !packable(r) {
			t.Fatalf("record %d: a lean record is not packable", i)
		}
		p := string(packRecord(nil, r))
		got, err := unpackRecord(p)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(normalized(got), normalized(r)) {
			t.Fatalf("record %d:\n got %+v %+v\nwant %+v %+v", i, *got.Call, got, *r.Call, r)
		}
		for j := range r.Ops {
			if (r.Ops[j].Failure == r.Failure) != (got.Ops[j].Failure == got.Failure) {
				t.Errorf("record %d, op %d: the call's failure is not shared as it was", i, j)
			}
		}
		packed += len(p)
	}
	t.Logf("%d records, %.0f bytes each packed", len(recs), float64(packed)/float64(len(recs)))
	if _, err := unpackRecord(string(packRecord(nil, recs[0]))[:20]); err == nil {
		t.Error("a cut packing unpacked without an error")
	}
	full := *recs[0]
	call := *full.Call
	call.Arguments = []byte(`{}`)
	full.Call = &call
	if packable(&full) {
		t.Error("a record with its payloads is packable")
	}
}

// normalized returns r with its times as instants in UTC, which is what
// packing keeps of them (the engine reads nothing else).
func normalized(r *audit.Record) audit.Record {
	n := *r
	c := *r.Call
	utc := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return time.Unix(0, t.UnixNano()).UTC()
	}
	c.Time, c.Received = utc(c.Time), utc(c.Received)
	// The response's sum is not packed: the engine keeps it beside the
	// packed record, in its dedupe entry (seen.resp).
	c.RespSum = 0
	n.Call = &c
	n.Ops = append([]audit.Op(nil), r.Ops...)
	for i := range n.Ops {
		n.Ops[i].RetryAfter = utc(n.Ops[i].RetryAfter)
	}
	return n
}

// readAll decodes a capture into records, skipping its bad lines.
func readAll(t testing.TB, lines [][]byte) []*audit.Record {
	t.Helper()
	rd := dialect.NewReader(dialect.Config{})
	var recs []*audit.Record
	for _, line := range lines {
		dec, err := capture.NewDecoder(bytes.NewReader(line), "line")
		if err != nil {
			continue
		}
		c, err := dec.Next()
		if err != nil {
			continue
		}
		recs = append(recs, rd.Read(c))
	}
	return recs
}
