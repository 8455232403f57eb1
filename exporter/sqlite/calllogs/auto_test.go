package calllogs_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// openAuto opens the store of dir with calls: auto, its call logs opened
// with ro (read-only, as the --data-dir readers open them) and opts'
// other fields.
func openAuto(t *testing.T, dir string, ro bool, opts sqlite.Options) (*sqlite.Store, error) {
	t.Helper()
	logs, err := calllogs.Open(calllogs.Dir(dir), calllog.Options{ReadOnly: ro})
	if err != nil {
		t.Fatal(err)
	}
	opts.Calls, opts.CallLog = sqlite.CallsAuto, logs
	st, err := sqlite.Open(filepath.Join(dir, "audit.db"), opts)
	if err != nil {
		logs.Close()
	}
	return st, err
}

// tableCalls counts the calls table of dir's store file.
func tableCalls(t *testing.T, dir string) int64 {
	t.Helper()
	n, _, err := sqlite.Count(context.Background(), filepath.Join(dir, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOpen_CallsAuto: calls: auto keeps the calls of a new store in the
// call logs, those of a store whose table holds calls in the table (as
// before it), chooses the table with ack: log or without a call log, and
// refuses a store whose table and logs both hold calls, naming both; a
// read-only open (the --data-dir readers') chooses as the writer did.
func TestOpen_CallsAuto(t *testing.T) {
	ctx := context.Background()
	expect := func(t *testing.T, st *sqlite.Store, want string) {
		t.Helper()
		if got, why := st.CallsKept(); got != want || why == "" {
			t.Fatalf("calls kept in %q (%s), want %q", got, why, want)
		}
	}
	t.Run("new_data_dir_log", func(t *testing.T) {
		dir := t.TempDir()
		st, err := openAuto(t, dir, false, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		expect(t, st, sqlite.CallsLog)
		if _, err := st.AppendCalls(ctx, gen(t, 1).Records(20)); err != nil {
			t.Fatal(err)
		}
		st.Close()
		if n := tableCalls(t, dir); n != 0 || !calllogs.InUse(dir) {
			t.Fatalf("calls table %d, logs in use %v: want the calls in the logs", n, calllogs.InUse(dir))
		}
		for _, ro := range []bool{false, true} {
			st, err := openAuto(t, dir, ro, sqlite.Options{})
			if err != nil {
				t.Fatalf("open again (read-only %v): %v", ro, err)
			}
			expect(t, st, sqlite.CallsLog)
			n := 0
			if err := st.ScanCalls(ctx, time.Time{}, func(*audit.Record) error { n++; return nil }); err != nil || n != 20 {
				t.Fatalf("read-only %v: %d calls read, %v; want 20", ro, n, err)
			}
			st.Close()
		}
	})
	t.Run("calls_in_table_sqlite", func(t *testing.T) {
		dir := t.TempDir()
		st, err := sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsSQLite})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendCalls(ctx, gen(t, 2).Records(10)); err != nil {
			t.Fatal(err)
		}
		st.Close()
		for _, ro := range []bool{false, true} {
			st, err := openAuto(t, dir, ro, sqlite.Options{})
			if err != nil {
				t.Fatalf("read-only %v: %v", ro, err)
			}
			expect(t, st, sqlite.CallsSQLite)
			if !ro {
				if _, err := st.AppendCalls(ctx, gen(t, 3).Records(10)); err != nil {
					t.Fatal(err)
				}
			}
			st.Close()
		}
		// The generators of two seeds share some calls: more than 10.
		if n := tableCalls(t, dir); n <= 10 || calllogs.InUse(dir) {
			t.Fatalf("calls table %d, logs in use %v: want the later calls in the table too", n, calllogs.InUse(dir))
		}
	})
	t.Run("ack_log_sqlite", func(t *testing.T) {
		st, err := openAuto(t, t.TempDir(), false, sqlite.Options{Ack: sqlite.AckLog})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		expect(t, st, sqlite.CallsSQLite)
	})
	t.Run("no_call_log_sqlite", func(t *testing.T) {
		st, err := sqlite.Open(filepath.Join(t.TempDir(), "audit.db"), sqlite.Options{Calls: sqlite.CallsAuto})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		expect(t, st, sqlite.CallsSQLite)
	})
	t.Run("both_refused", func(t *testing.T) {
		dir := t.TempDir()
		st, err := openAuto(t, dir, false, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendCalls(ctx, gen(t, 4).Records(5)); err != nil {
			t.Fatal(err)
		}
		st.Close()
		// calls: sqlite does not read the logs: it stores calls beside them.
		st, err = sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsSQLite})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendCalls(ctx, gen(t, 5).Records(5)); err != nil {
			t.Fatal(err)
		}
		st.Close()
		for _, ro := range []bool{false, true} {
			st, err := openAuto(t, dir, ro, sqlite.Options{})
			if err == nil {
				st.Close()
			}
			if !errors.Is(err, sqlite.ErrCallsInBoth) || !contains(err.Error(), "calls table holds 5", "call logs hold calls", "migrate-calls") {
				t.Fatalf("read-only %v: open with both holding calls: %v, want ErrCallsInBoth naming both", ro, err)
			}
		}
	})
	t.Run("logs_with_ack_log_refused", func(t *testing.T) {
		dir := t.TempDir()
		st, err := openAuto(t, dir, false, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendCalls(ctx, gen(t, 6).Records(5)); err != nil {
			t.Fatal(err)
		}
		st.Close()
		st, err = openAuto(t, dir, false, sqlite.Options{Ack: sqlite.AckLog})
		if err == nil {
			st.Close()
			t.Fatal("opened with ack: log while the call logs hold calls: they would not be read")
		}
	})
	t.Run("bad_value", func(t *testing.T) {
		o := sqlite.Options{Calls: "both"}
		if err := o.Validate(); err == nil || !contains(err.Error(), "auto, sqlite or log") {
			t.Fatalf("Validate(calls: both) = %v", err)
		}
	})
}

// contains reports whether s holds every one of subs.
func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
