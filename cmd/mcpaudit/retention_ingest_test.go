package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/clickhouse"
)

// TestServe_RetainedCutoff: the earliest time serve takes a call at is
// the next retention round's cutoff: serve.retention (or the tenant's
// own) back from the newest call stored or in the request when that is
// older than now (serve.retention_from: newest_call), from now with
// retention_from: now or on ClickHouse (TTL).
func TestServe_RetainedCutoff(t *testing.T) {
	now := time.Now()
	day := 24 * time.Hour
	var ch clickhouse.Retention
	f := func(store, from string, stored time.Time, tenant string, newest time.Time, want time.Time, wantSetting string) {
		t.Helper()
		cfg := NewDefaultConfig()
		cfg.Serve.Store, cfg.Serve.RetentionFrom = store, from
		cfg.Serve.TenantRetention = map[string]Duration{"acme": Duration(time.Hour)}
		cfg.Serve.ClickHouse.Retention = ch
		cfg.Serve.Pipeline.Now = func() time.Time { return now }
		s := &server{cfg: cfg}
		if !stored.IsZero() {
			s.raiseNewest(stored)
		}
		got, setting := s.retained(tenant, newest)
		if !got.Equal(want) || setting != wantSetting {
			t.Errorf("%s %s, stored %v, %s, newest %v: %v %q; want %v %q", store, from, stored, tenant, newest, got, setting, want, wantSetting)
		}
	}
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	old := now.Add(-60 * day)
	f("sqlite", RetentionFromNewestCall, time.Time{}, "", now.Add(-time.Minute), now.Add(-time.Minute-30*day), "serve.retention 30d, counted back from the newest call "+at(now.Add(-time.Minute)))
	f("sqlite", RetentionFromNewestCall, time.Time{}, "", old, old.Add(-30*day), "serve.retention 30d, counted back from the newest call "+at(old))
	// A newer call stored moves the cutoff; a call ahead of now does not
	// pass now.
	f("sqlite", RetentionFromNewestCall, now.Add(-time.Hour), "", old, now.Add(-time.Hour-30*day), "serve.retention 30d, counted back from the newest call "+at(now.Add(-time.Hour)))
	f("sqlite", RetentionFromNewestCall, time.Time{}, "", now.Add(time.Hour), now.Add(-30*day), "serve.retention 30d, counted back from now")
	f("sqlite", RetentionFromNewestCall, time.Time{}, "acme", now, now.Add(-time.Hour), "serve.tenant_retention.acme 1h, counted back from now")
	f("sqlite", RetentionFromNow, time.Time{}, "", old, now.Add(-30*day), "serve.retention 30d, counted back from now")
	f("clickhouse", RetentionFromNewestCall, time.Time{}, "", old, now.Add(-30*day), "serve.retention 30d, counted back from now")
	f("clickhouse", RetentionFromNewestCall, time.Time{}, "acme", old, now.Add(-time.Hour), "serve.tenant_retention.acme 1h, counted back from now")
	// ClickHouse's own retention, when set, is the one its store keeps.
	ch = clickhouse.Retention{Default: 7 * day, Tenants: map[string]time.Duration{"globex": 2 * day}}
	f("clickhouse", RetentionFromNewestCall, time.Time{}, "", old, now.Add(-7*day), "serve.clickhouse.retention.default 1w, counted back from now")
	f("clickhouse", RetentionFromNewestCall, time.Time{}, "globex", old, now.Add(-2*day), "serve.clickhouse.retention.tenants.globex 2d, counted back from now")
	// Its tenants listed replace serve.tenant_retention's.
	f("clickhouse", RetentionFromNewestCall, time.Time{}, "acme", old, now.Add(-7*day), "serve.clickhouse.retention.default 1w, counted back from now")
	f("sqlite", RetentionFromNewestCall, time.Time{}, "acme", now, now.Add(-time.Hour), "serve.tenant_retention.acme 1h, counted back from now")
}

// TestServe_RefusesWhatRetentionDeletes: a call older than retention keeps
// (here 30 days before the newest call) is refused on its line, named
// with the field, the cutoff and the setting, and so is a call dated at
// the Unix epoch; the call beside them is acknowledged, and the next
// retention round deletes nothing acknowledged. Before, both were
// acknowledged and the round deleted them. analyze, which has no
// retention, takes them all.
func TestServe_RefusesWhatRetentionDeletes(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Retention = Duration(30 * 24 * time.Hour)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := startTest(t, cfg)
	now := time.Now().UTC().Truncate(time.Millisecond)
	line := func(at time.Time, id int) string {
		return fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s1","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a.gram"}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false}}}`,
			at.Format(time.RFC3339Nano), id, id)
	}
	old := now.Add(-40 * 24 * time.Hour)
	body := strings.Join([]string{line(old, 1), line(now, 2), line(time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), 3)}, "\n") + "\n"
	resp, err := http.Post("http://"+s.ingestAddr+"/v1/calls", "application/x-ndjson", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cutoff := now.Add(-30 * 24 * time.Hour).Format(time.RFC3339)
	for _, want := range []string{`"accepted":1`, `"rejected":2`,
		"body:1: field time: " + old.Format(time.RFC3339Nano) + " is older than retention keeps: calls before " + cutoff +
			" are deleted (serve.retention 30d, counted back from the newest call " + now.Format(time.RFC3339) + "); it would be acknowledged, then deleted",
		"body:3: field time: 1970-01-01T00:00:00Z is not after the Unix epoch"} {
		if !bytes.Contains(answer, []byte(want)) {
			t.Errorf("answer %d %s: want %q", resp.StatusCode, answer, want)
		}
	}
	count := func() int {
		n := 0
		if err := s.store.ScanCalls(context.Background(), time.Time{}, func(*audit.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d calls stored, want the one acknowledged", n)
	}
	s.expire(context.Background(), time.Now())
	if n := count(); n != 1 {
		t.Errorf("after a retention round %d calls are stored, want the one acknowledged", n)
	}

	path := filepath.Join(t.TempDir(), "old.ndjson")
	writeLines(t, path, [][]byte{[]byte(line(time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC), 3)), []byte(line(old, 1)), []byte(line(now, 2))})
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"analyze", "--progress", "never", "--format", "json", "--summary", "json", path}, nil, &out, &errb); code != 0 {
		t.Fatalf("analyze: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), `"calls":3`) || !strings.Contains(errb.String(), `"rejected":0`) {
		t.Errorf("analyze summary %s: want the 3 calls taken, none rejected", errb.String())
	}
}
