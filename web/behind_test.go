package web

import (
	"context"
	"fmt"
	"html"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestStatusBar_QuietLateDelivery (op20's D4): a quiet partition whose last
// delivery came late, every call judged and nothing waiting, is not behind
// and its lag is not the bar's "max lag": the bar says how late that
// delivery came, as that. Before, 20 such partitions showed "partitions
// behind 21" and their delivery's lag as "max lag", read by on-call as a
// backlog. A real engine, wired as serve wires the bar (WithPartitions
// with detect.idle_timeout): 20 servers each got one call delivered 58 s
// after its time and went quiet; server thegram waits, with calls of an
// on-time pod, for a pod 90 s behind: the one partition behind.
func TestStatusBar_QuietLateDelivery(t *testing.T) {
	cfg := detect.NewDefaultConfig()
	e := detect.NewEngine(cfg)
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	wall := time.Date(2026, 12, 6, 9, 20, 0, 0, time.UTC)
	id := 0
	for i := range 20 {
		id++
		rec := gramRead(t, rd, wall.Add(-58*time.Second), id)
		rec.Call.Server = fmt.Sprintf("thegram-ex%02d", i+1)
		e.Add("calls:op20", rec, wall)
	}
	for range 60 {
		for _, f := range []struct {
			pod    string
			behind time.Duration
		}{{"pod-0", time.Second}, {"pod-slow", 90 * time.Second}} {
			id++
			e.Add("otlp:thegram/"+f.pod, gramRead(t, rd, wall.Add(-f.behind), id), wall)
		}
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	var slow detect.PartitionStatus
	quiet := 0
	for _, p := range e.Status(wall) {
		switch {
		case p.Server == "thegram":
			slow = p
		case p.Buffered == 0 && p.Pending == 0 && p.Lag > 50*time.Second && p.Lag < time.Minute:
			quiet++
		}
	}
	if quiet != 20 || slow.Buffered == 0 || slow.Lag < 90*time.Second {
		t.Fatalf("the engine does not hold 20 quiet partitions about 59 s behind (%d) and thegram 90 s behind with calls waiting (%+v)", quiet, slow)
	}

	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return wall }
	ask := func() []detect.PartitionStatus { return e.Status(wall) }
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return ask(), 0, 0 }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := New(st, q, Config{}, WithPartitions(NewMetricsStatus(ctx, prometheus.NewRegistry(), st), ask, cfg.IdleTimeout), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	t.Cleanup(hs.Close)

	lagRe := regexp.MustCompile(`max lag <b id="max-lag">([^<]+)</b>`)
	behindRe := regexp.MustCompile(`<span id="behind" title="([^"]*)">partitions behind <b>([^<]+)</b>`)
	quietRe := regexp.MustCompile(`<span id="quiet-lag" title="[^"]*">last delivery late by <b>([^<]+)</b> \(([^)]*)\)`)
	look := func(path string) (lag, behind, title string, quietLag []string) {
		t.Helper()
		_, page := body(t, client(t), "GET", hs.URL+path, nil)
		l, b := lagRe.FindStringSubmatch(page), behindRe.FindStringSubmatch(page)
		if l == nil || b == nil {
			t.Fatalf("GET %s: no max lag (%v) or partitions behind with a title (%v):\n%s", path, l, b, page)
		}
		return l[1], b[2], html.UnescapeString(b[1]), quietRe.FindStringSubmatch(page)
	}

	want := slow.Lag.Round(time.Millisecond).String()
	sr, _ := q.StatusOf("", "", wall)
	line, _ := api.BehindLine(sr)
	lag, behind, title, ql := look("/")
	if lag != want || behind != "1" {
		t.Errorf("max lag %s, partitions behind %s; want %s (thegram's, whose calls wait) and 1", lag, behind, want)
	}
	if title != line {
		t.Errorf("partitions behind's title %q; want mcpaudit status's line %q", title, line)
	}
	if ql == nil || ql[1] != "59s" {
		t.Errorf("the bar does not say the quiet partitions' lag is their last delivery's (59 s): %v", ql)
	}

	// Only the quiet ones: nothing behind, no lag of what waits.
	onlyQuiet := WithPartitions(func(context.Context) Status { return Status{} }, func() []detect.PartitionStatus {
		var ps []detect.PartitionStatus
		for _, p := range e.Status(wall) {
			if p.Server != "thegram" {
				ps = append(ps, p)
			}
		}
		return ps
	}, cfg.IdleTimeout)(ctx)
	if onlyQuiet.PartitionsBehind != 0 || onlyQuiet.MaxLag != 0 || onlyQuiet.QuietLag.Round(time.Second) != 59*time.Second {
		t.Errorf("20 quiet partitions: %d behind, max lag %s, last delivery late by %s; want 0, 0s, 59s", onlyQuiet.PartitionsBehind, onlyQuiet.MaxLag, onlyQuiet.QuietLag)
	}
}
