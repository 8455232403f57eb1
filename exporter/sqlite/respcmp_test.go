package sqlite

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAppendCallsCompared_ReadPaths: the stored calls compared with the
// calls sent again are found through the id index, past its mark, and
// without it (one probe of calls_key per key), for a tenant and for none;
// a response that differs is told, the same one is not.
func TestAppendCallsCompared_ReadPaths(t *testing.T) {
	for _, ack := range []string{AckCommit, AckLog} {
		s := openTemp(t, Options{Ack: ack})
		defer s.Close()
		t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
		call := func(i int, tenant, result string) audit.Record {
			return audit.Record{Call: &audit.Call{ID: "c_" + string(rune('a'+i)) + "0000000000000000000", Time: t0.Add(time.Duration(i) * time.Second),
				Server: "thegram", Tenant: tenant, Tool: "gram_projects", Responded: true, Result: []byte(result), Source: "calls:1"}}
		}
		var first, again []audit.Record
		var want []int
		for i := range 6 {
			tenant := []string{"", "acme"}[i%2]
			first = append(first, call(i, tenant, `{"n":1}`))
			if i%3 == 0 {
				want = append(want, i)
				again = append(again, call(i, tenant, `{"n":2}`))
			} else {
				again = append(again, call(i, tenant, `{ "n" : 1 }`))
			}
		}
		if n, err := s.AppendCalls(context.Background(), first); err != nil || n != len(first) {
			t.Fatalf("%s: AppendCalls = %d, %v", ack, n, err)
		}
		check := func(path string) {
			t.Helper()
			n, _, differ, err := s.AppendCallsCompared(context.Background(), again)
			if err != nil || n != 0 || !reflect.DeepEqual(differ, want) {
				t.Errorf("%s, %s: AppendCallsCompared = %d, %v, %v; want 0, %v", ack, path, n, differ, err, want)
			}
		}
		check("through the index")
		mark := s.ids.mark.Load()
		s.ids.mark.Store(0)
		check("past the mark")
		s.ids.mark.Store(mark)
		x := s.ids
		s.ids = nil
		check("without the index")
		s.ids = x
	}
}

// TestAppendCallsCompared_DrainHeld: with ack "log" and the drain held up
// (here its gate, as a lock on the file would), an append holding a call
// sent again with another response waits compareWait for the drain, not
// log_wait, and then takes it as stored without comparing, saying so; the
// acknowledgement does not wait as long as an SDK exporter's timeout.
func TestAppendCallsCompared_DrainHeld(t *testing.T) {
	var logs bytes.Buffer
	opts := Options{Ack: AckLog, LogWait: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	s := openTemp(t, opts)
	defer s.Close()
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	call := func(result string) audit.Record {
		return audit.Record{Call: &audit.Call{ID: "c_a0000000000000000000", Time: t0, Server: "thegram", Tool: "gram_projects",
			Responded: true, Result: []byte(result), Source: "calls:1"}}
	}
	if _, err := s.AppendCalls(t.Context(), []audit.Record{call(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.caughtUp(t.Context(), "test"); err != nil {
		t.Fatal(err)
	}
	s.clog.gate.Lock()
	// A new call ahead of it in the log, not drained: the comparison
	// waits for it.
	fresh := records(t, 1)
	if _, err := s.AppendCalls(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
	n, _, differ, err := s.AppendCallsCompared(t.Context(), []audit.Record{call(`{"n":2}`)})
	s.clog.gate.Unlock()
	if err != nil || n != 0 || len(differ) != 0 {
		t.Errorf("AppendCallsCompared with the drain held = %d, %v, %v; want 0 new, none compared, no error", n, differ, err)
	}
	if !strings.Contains(logs.String(), "cannot compare the responses") || !strings.Contains(logs.String(), "after 2s") {
		t.Errorf("the log does not say the comparison gave up after compareWait (2s):\n%s", logs.String())
	}
}
