package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestSLOUntil: slo ends its window at --until, as GET /api/v1/slo's
// until, /slo's until and report --until do. Writes count at their calls'
// event time, so the writes of a capture posted from 40 days back, as the
// README's sample is, lie before a window that ends now: before op25 slo
// printed "SLI: n/a" for them and had no flag to reach them. Without
// --until, an empty window says on standard error that --until reaches
// older writes.
func TestSLOUntil(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC().Add(-40 * 24 * time.Hour).Truncate(time.Second)
	ws := []audit.Write{
		{CallID: "c_a", Time: at, Server: "thegram", Tool: "gram_patch", State: audit.StateDurable, StateTime: at},
		{CallID: "c_b", Time: at, Server: "thegram", Tool: "gram_patch", State: audit.StateUnverified, StateTime: at},
	}
	if err := st.Commit(context.Background(), audit.Results{Writes: ws, Watermark: at}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	t.Run("window_ending_now", func(t *testing.T) {
		code, out, errs := cliRun("slo", "--data-dir", dir)
		if code != 0 || !strings.Contains(out, "SLI: n/a") || !strings.Contains(errs, "--until") {
			t.Errorf("exit %d\n%s\nstderr %q: want SLI n/a and a pointer to --until", code, out, errs)
		}
		// Where the stored writes are, as report says it (op47: slo
		// named no time).
		stamp := at.Format("2006-01-02 15:04:05 MST")
		want := "the stored writes run from " + stamp + " to " + stamp + " (a write counts at its call's event time): end the window there with --until \"" +
			at.Truncate(time.Minute).Add(time.Minute).Format("2006-01-02 15:04") + "\" --window 1d"
		if !strings.Contains(errs, want) {
			t.Errorf("stderr %q, want %q", errs, want)
		}
		code, out, _ = cliRun("slo", "--data-dir", dir, "--format", "json")
		if code != 0 || !strings.Contains(out, `"stored_writes":{"first":"`+at.Format(time.RFC3339)+`"`) {
			t.Errorf("exit %d, JSON %s: want stored_writes from %s", code, out, at.Format(time.RFC3339))
		}
	})
	t.Run("window_ending_at_until", func(t *testing.T) {
		until := at.Add(time.Hour)
		code, out, errs := cliRun("slo", "--data-dir", dir, "--window", "1d", "--until", until.Format(time.RFC3339))
		if want := "to " + until.Format(time.RFC3339) + ")"; code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "SLI: 0.50000 (1 / 2)") {
			t.Errorf("exit %d\n%s\nstderr %q: want the window to end %s and SLI 0.5", code, out, errs, until.Format(time.RFC3339))
		}
		if strings.Contains(errs, "--until") {
			t.Errorf("stderr %q points to --until when it was given", errs)
		}
	})
	t.Run("page_time", func(t *testing.T) {
		code, out, errs := cliRun("slo", "--data-dir", dir, "--until", at.Add(time.Minute).Format("2006-01-02 15:04"))
		if code != 0 || !strings.Contains(out, "SLI: 0.50000 (1 / 2)") {
			t.Errorf("exit %d\n%s\nstderr %q", code, out, errs)
		}
	})
	t.Run("bad_until", func(t *testing.T) {
		code, _, errs := cliRun("slo", "--data-dir", dir, "--until", "yesterday")
		if code != 2 || !strings.Contains(errs, "until") {
			t.Errorf("exit %d %q, want 2 naming until", code, errs)
		}
	})
}
