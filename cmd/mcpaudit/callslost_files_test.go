package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// filesOf lists every file under dir: its path, size and SHA-256.
func filesOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			out = append(out, rel+"/")
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %x", rel, len(b), sha256.Sum256(b)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOpenStore_CallsLostLeavesFilesAsFound (seal52): serve's open of a
// data dir whose call log lost synced blocks is refused
// (sqlite.ErrCallsLost), and leaves the call logs as it found them: the
// data dir is the evidence. Until seal52 the log's open had already cut
// the truncated live segment's partial last block and made a removed live
// segment again, empty, before the store's check refused it. A torn tail
// (a block whose sync never returned) is still cut when the open goes on.
func TestOpenStore_CallsLostLeavesFilesAsFound(t *testing.T) {
	g, err := storetest.NewGenerator(5252, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	recs := g.Records(400)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	write := func(t *testing.T) (Config, string) {
		t.Helper()
		cfg := NewDefaultConfig()
		cfg.Serve.DataDir = t.TempDir()
		st, err := openStore(context.Background(), cfg, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(recs); i += 50 { // a block each
			if _, err := st.AppendCalls(context.Background(), recs[i:i+50]); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		segs, err := filepath.Glob(filepath.Join(calllogs.Dir(cfg.Serve.DataDir), "*", "*.seg"))
		if err != nil || len(segs) != 1 {
			t.Fatalf("segments %v (%v); want the live one", segs, err)
		}
		return cfg, segs[0]
	}
	open := func(cfg Config) (audit.Store, string, error) {
		var buf bytes.Buffer
		st, err := openStore(context.Background(), cfg, slog.New(slog.NewTextHandler(&buf, nil)), nil)
		return st, buf.String(), err
	}
	for _, tc := range []struct {
		name string
		lose func(seg string) error
	}{
		{"live_segment_cut_inside_a_block", func(seg string) error {
			fi, err := os.Stat(seg)
			if err != nil {
				return err
			}
			return os.Truncate(seg, fi.Size()-100)
		}},
		{"live_segment_removed", os.Remove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, seg := write(t)
			if err := tc.lose(seg); err != nil {
				t.Fatal(err)
			}
			calls := calllogs.Dir(cfg.Serve.DataDir)
			before := filesOf(t, calls)
			st, out, err := open(cfg)
			if err == nil {
				st.Close()
				t.Fatalf("serve's store opened on a call log that lost synced blocks")
			}
			if !errors.Is(err, sqlite.ErrCallsLost) {
				t.Fatalf("open: %v; want ErrCallsLost", err)
			}
			if after := filesOf(t, calls); !slices.Equal(before, after) {
				t.Errorf("the refused open changed the call logs:\nbefore %q\nafter  %q\nlog:\n%s", before, after, out)
			}
		})
	}
	t.Run("torn_tail_cut_when_the_open_goes_on", func(t *testing.T) {
		cfg, seg := write(t)
		fi, err := os.Stat(seg)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(append([]byte("CLB1"), bytes.Repeat([]byte{7}, 50)...))
		f.Close()
		st, out, err := open(cfg)
		if err != nil {
			t.Fatalf("open after a torn tail: %v", err)
		}
		defer st.Close()
		if now, err := os.Stat(seg); err != nil || now.Size() != fi.Size() {
			t.Errorf("the torn tail was not cut: %v, %v; want %d bytes", now, err, fi.Size())
		}
		if !strings.Contains(out, "cut the torn tail") {
			t.Errorf("serve did not say it cut the torn tail:\n%s", out)
		}
		if n, err := st.AppendCalls(context.Background(), g.Records(10)); err != nil || n != 10 {
			t.Errorf("append after the open: %d, %v; want 10 stored", n, err)
		}
	})
}
