package calllogs_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// TestVerify_RacingRetention: a live verify takes the store's snapshot,
// serve's retention then runs a pass (chains its cut, writes the cuts
// file, removes segments), and verify opens the logs. The cut chained
// after the snapshot accounts for the files: no TAMPERED. A cuts file
// moved on by hand past that cut still is. The honest case fails before
// verify read the cuts again after opening the logs (the cuts file "past
// the last cut the chain records", segments "deleted outside retention").
func TestVerify_RacingRetention(t *testing.T) {
	f := func(t *testing.T, edit func(dir string, recs []audit.Record)) (bool, string) {
		t.Helper()
		c := newChained(t)
		recs := gen(t, 6).Records(300)
		slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
		c.write(t, recs)
		st := c.open(t, nil)
		defer st.Close()
		r, err := sqlite.VerifyLogged(context.Background(), filepath.Join(c.dir, "audit.db"), c.keys, func() (sqlite.BlockLog, error) {
			if _, err := st.DeleteBefore(context.Background(), recs[150].Call.Time); err != nil {
				t.Fatal(err)
			}
			if edit != nil {
				edit(c.dir, recs)
			}
			return calllogs.Open(calllogs.Dir(c.dir), calllog.Options{ReadOnly: true})
		})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		r.Print(&b)
		return r.OK(), b.String()
	}
	t.Run("honest", func(t *testing.T) {
		ok, out := f(t, nil)
		if !ok || !strings.Contains(out, "after the store's snapshot was taken") {
			t.Errorf("verify racing retention: want ok, with the later cut noted:\n%s", out)
		}
	})
	t.Run("cuts_file_moved_on", func(t *testing.T) {
		ok, out := f(t, func(dir string, recs []audit.Record) {
			path := filepath.Join(calllogs.Dir(dir), "cuts")
			if err := os.WriteFile(path, []byte("- "+itoa(recs[250].Call.Time.UnixNano())+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		})
		if ok || !strings.Contains(out, "the call logs' cuts file: puts the tenant's retention cut at") {
			t.Errorf("verify racing retention, cuts file moved on past the chained cut: want TAMPERED:\n%s", out)
		}
	})
}
