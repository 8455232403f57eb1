package receiver_test

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestRetained: a call older than retention keeps (Receiver.Retained,
// which serve sets from serve.retention) would be acknowledged and then
// deleted by the next retention round: it is rejected alone as a bad
// time, naming the field, the cutoff and the setting, over /v1/calls and
// OTLP (HTTP protobuf and JSON, gRPC); the calls beside it are stored.
// The cutoff is asked with the request's newest call, which moves a
// cutoff counted back from the newest call. A call at or before the Unix
// epoch is rejected with or without a retention.
func TestRetained(t *testing.T) {
	// keep is the retention of the tests: 30 days back from the newest
	// call of the request (as serve's newest_call, the store empty).
	const keep = 30 * 24 * time.Hour
	var asked []time.Time
	retained := func(tenant string, newest time.Time) (time.Time, string) {
		asked = append(asked, newest)
		return newest.Add(-keep), "serve.retention 30d, counted back from the newest call"
	}
	old := now.Add(-keep - time.Hour)
	cutoff := now.Add(2 * time.Millisecond).Add(-keep).UTC().Format(time.RFC3339)
	t.Run("calls", func(t *testing.T) {
		e := newEnv(t, nil)
		e.rc.Retained = retained
		asked = nil
		lines := []string{
			record("thegram", "gram_read", old, 1),
			record("thegram", "gram_read", now, 2),
			record("thegram", "gram_read", time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC), 3),
			record("thegram", "gram_read", now.Add(2*time.Millisecond), 4),
			record("thegram", "gram_read", now.Add(-keep+time.Hour), 5),
		}
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(strings.Join(lines, "\n")+"\n"))
		if a.status != 200 || !strings.Contains(a.body, `"accepted":3`) || !strings.Contains(a.body, `"rejected":2`) {
			t.Fatalf("%d %s, want 200 with 3 accepted and 2 rejected", a.status, a.body)
		}
		for _, want := range []string{
			"body:1: field time: " + old.UTC().Format(time.RFC3339Nano) + " is older than retention keeps: calls before " + cutoff +
				" are deleted (serve.retention 30d, counted back from the newest call); it would be acknowledged, then deleted",
			"body:3: field time: 1970-01-02T00:00:00Z is older than retention keeps",
		} {
			if !strings.Contains(a.body, want) {
				t.Errorf("answer %s: want %q", a.body, want)
			}
		}
		if len(asked) != 1 || !asked[0].Equal(now.Add(2*time.Millisecond)) {
			t.Errorf("retention asked with %v, want once with the request's newest call", asked)
		}
		if n := len(e.stored(t)); n != 3 {
			t.Errorf("%d calls stored, want 3", n)
		}
		if n := e.rejectedCount(t, metrics.RejectBadTime, metrics.SourceCallsHTTP); n != 2 {
			t.Errorf("%v records counted as bad_time, want 2", n)
		}
		if ls := e.logs.lines(t, "rejected_record"); len(ls) != 2 || ls[0]["reason"] != string(metrics.RejectBadTime) {
			t.Errorf("rejected_record lines %v, want 2 of reason bad_time", ls)
		}
		// Old calls only: the newest of the request sets the cutoff (as the
		// next round would count back from it), so old is kept this time.
		a = e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(record("thegram", "gram_read", old, 6)+"\n"+record("thegram", "gram_read", now.Add(-10*keep), 7)+"\n"))
		if a.status != 200 || !strings.Contains(a.body, `"accepted":1`) || !strings.Contains(a.body, `"rejected":1`) || !strings.Contains(a.body, "body:2: field time: ") {
			t.Errorf("%d %s, want 200 with line 2 rejected, 30 days before line 1", a.status, a.body)
		}
	})
	for _, carrier := range []string{"protobuf", "json", "grpc"} {
		t.Run(carrier, func(t *testing.T) {
			e := newEnv(t, nil)
			e.rc.Retained = retained
			req := traces("thegram", 3, func(sp ptrace.Span) { startAt(sp, pcommon.NewTimestampFromTime(old)) })
			resp, src := e.exportBy(t, carrier, req)
			want := "resourceSpans[0].scopeSpans[0].spans[0]: field start_time_unix_nano: " + old.UTC().Format(time.RFC3339Nano) +
				" is older than retention keeps: calls before " + cutoff + " are deleted (serve.retention 30d, counted back from the newest call); it would be acknowledged, then deleted"
			if ps := resp.PartialSuccess(); ps.RejectedSpans() != 1 || ps.ErrorMessage() != want {
				t.Errorf("partial success %d %q, want 1 %q", ps.RejectedSpans(), ps.ErrorMessage(), want)
			}
			if n := len(e.stored(t)); n != 2 {
				t.Errorf("%d calls stored, want the 2 other spans", n)
			}
			if n := e.rejectedCount(t, metrics.RejectBadTime, src); n != 1 {
				t.Errorf("%v spans counted as bad_time, want 1", n)
			}
			if ls := e.logs.lines(t, "rejected_span"); len(ls) != 1 || ls[0]["reason"] != string(metrics.RejectBadTime) {
				t.Errorf("rejected_span lines %v, want one of reason bad_time", ls)
			}
		})
	}
	t.Run("epoch", func(t *testing.T) {
		// No retention set (Retained nil): a call at or before the Unix
		// epoch is still refused, a clock never set; the day after is
		// taken.
		e := newEnv(t, nil)
		lines := []string{
			record("thegram", "gram_read", time.Unix(0, 0), 1),
			record("thegram", "gram_read", time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), 2),
			record("thegram", "gram_read", time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC), 3),
		}
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(strings.Join(lines, "\n")+"\n"))
		if a.status != 200 || !strings.Contains(a.body, `"accepted":1`) ||
			!strings.Contains(a.body, "body:1: field time: 1970-01-01T00:00:00Z is not after the Unix epoch (1970-01-01T00:00:00Z): a clock not set, or a zero time") ||
			!strings.Contains(a.body, "body:2: field time: 1969-12-31T23:00:00Z is not after the Unix epoch") {
			t.Errorf("%d %s, want lines 1 and 2 rejected for the epoch, line 3 taken", a.status, a.body)
		}
		if n := e.rejectedCount(t, metrics.RejectBadTime, metrics.SourceCallsHTTP); n != 2 {
			t.Errorf("%v records counted as bad_time, want 2", n)
		}
	})
}
