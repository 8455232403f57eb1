package forward

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestAuthLog: the first refusal of a run is logged, then one per
// authLogEvery with the count since; a success ends the run.
func TestAuthLog(t *testing.T) {
	var a authLog
	t0 := time.Date(2026, 12, 6, 19, 0, 0, 0, time.UTC)
	f := func(at time.Duration, wantLog, wantFirst bool, wantSince int) {
		t.Helper()
		log, first, since := a.refusal(t0.Add(at))
		if log != wantLog || first != wantFirst || since != wantSince {
			t.Errorf("refusal at +%v: log %v first %v since %d, want %v %v %d", at, log, first, since, wantLog, wantFirst, wantSince)
		}
	}
	f(0, true, true, 1)
	f(time.Second, false, false, 0)
	f(2*time.Minute, false, false, 0)
	f(authLogEvery-time.Nanosecond, false, false, 0)
	f(authLogEvery, true, false, 4) // three kept quiet, and this one
	f(authLogEvery+time.Second, false, false, 0)
	if n := a.accepted(); n != 6 {
		t.Errorf("accepted after 6 refusals: %d", n)
	}
	if n := a.accepted(); n != 0 {
		t.Errorf("accepted again: %d", n)
	}
	f(authLogEvery+2*time.Second, true, true, 1)
}

// TestForwarder_RefusedCredential: a relay the collector answers 401 or
// 403 logs one ERROR that says what to do (--token, $MCPAUDIT_TOKEN), not a
// WARN per try, keeps its records on disk, and sends them all once the
// collector takes its credential. op23 D9: a proxy without a token logged
// "cannot send call records; will retry ... 401" every few seconds for
// ever, naming no flag.
func TestForwarder_RefusedCredential(t *testing.T) {
	for _, tc := range []struct {
		name, token string
		status      int
		fix         string
	}{
		{"no_token", "", http.StatusUnauthorized, "give the relay a token with the ingest scope (--token or $MCPAUDIT_TOKEN)"},
		{"token_without_ingest", "tok-query", http.StatusForbidden, "the relay's token (--token or $MCPAUDIT_TOKEN) is not one the collector knows, or lacks the ingest scope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var accept atomic.Bool
			var posts, received atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1)
				if !accept.Load() {
					http.Error(w, "missing or unknown bearer token", tc.status)
					return
				}
				zr, err := gzip.NewReader(r.Body)
				if err != nil {
					http.Error(w, err.Error(), 400)
					return
				}
				b, _ := io.ReadAll(zr)
				n := strings.Count(string(b), "\n")
				received.Add(int64(n))
				fmt.Fprintf(w, `{"accepted":%d,"rejected":0}`, n)
			}))
			defer srv.Close()
			cfg := testConfig(t, srv.URL)
			cfg.Token = tc.token
			cfg.MinBackoff, cfg.MaxBackoff = time.Millisecond, 2*time.Millisecond
			reg := prometheus.NewRegistry()
			m, err := metrics.NewRelay(reg, "thegram")
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			f, err := New(cfg, m, slog.New(slog.NewJSONHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if err := f.Add(line(i)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "20 refused posts", func() bool { return posts.Load() >= 20 })
			type entry struct {
				Level, Msg, Fix string
				Refusals        int
			}
			read := func() []entry {
				var es []entry
				for _, l := range logs.lines() {
					var e entry
					if l != "" && json.Unmarshal([]byte(l), &e) != nil {
						t.Fatalf("log line %s", l)
					}
					es = append(es, e)
				}
				return es
			}
			var refusedLines int
			for _, e := range read() {
				switch {
				case strings.Contains(e.Msg, "will retry"):
					t.Errorf("a retry line per refused post: %+v", e)
				case strings.Contains(e.Msg, "refuses the relay's credential"):
					refusedLines++
					if e.Level != "ERROR" || !strings.Contains(e.Fix, tc.fix) {
						t.Errorf("the refusal's line %+v, want an ERROR whose fix says %q", e, tc.fix)
					}
				}
			}
			if refusedLines != 1 {
				t.Errorf("%d lines about the refused credential over %d posts, want 1:\n%s", refusedLines, posts.Load(), strings.Join(logs.lines(), "\n"))
			}
			if got := received.Load(); got != 0 {
				t.Fatalf("%d records received while refused", got)
			}
			// The credential is fixed: nothing was lost.
			accept.Store(true)
			waitFor(t, "the 3 buffered records", func() bool { return received.Load() == 3 })
			waitFor(t, "the line saying the collector accepts again", func() bool {
				for _, e := range read() {
					if strings.Contains(e.Msg, "accepts the relay's credential again") && e.Refusals >= 20 {
						return true
					}
				}
				return false
			})
			f.Close(t.Context())
		})
	}
}
