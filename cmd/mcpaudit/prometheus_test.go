package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/dashboards"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/mcpaudit/mcpaudit/rules"
	"github.com/mcpaudit/mcpaudit/rules/promtest"
)

// TestServe_Prometheus runs `mcpaudit serve` in-process under a real
// Prometheus that scrapes its /metrics every second and evaluates the rules
// of package rules (every for: shortened to 1s). A mixed capture with
// anomalies of every kind is replayed as call records in batches, each seen
// by its own scrape, then one uncertain write that only the wall clock
// settles. Then: pending writes drain, the findings counters agree with the
// API, the alerts of the anomalies fire, each for the servers that have the
// anomaly and not for the others, every recording rule, alert expression
// and dashboard query runs, and the panels show the capture. Last, stopping
// the server fires McpAuditCollectorDown.
// collectorDownFor is McpAuditCollectorDown's for: in TestServe_Prometheus:
// 10 failed scrapes in a row at its 1s interval.
const collectorDownFor = 10 * time.Second

func TestServe_Prometheus(t *testing.T) {
	promtest.Binary(t, "prometheus") // skip (or fail in CI) before any work
	began := time.Now()
	phase := func(what string) { t.Logf("%6.2fs %s", time.Since(began).Seconds(), what) }
	ctx := context.Background()

	cfg := testConfig(t, t.TempDir())
	// Windows close on the wall clock once traffic stops: a short
	// verification window makes the last uncertain write unverified within
	// seconds. It turns more of the capture's uncertain writes unverified than
	// the default 5m would; the other findings are the same. Not shorter:
	// the capture's follow-up calls come 2-3s apart, and with a 2s window no
	// write would ever leave pending verified (the Verification latency
	// panel would stay empty).
	cfg.Detect.VerifyWindow = 5 * time.Second
	// The capture is replayed from the past: its last write is judged when
	// its source has been quiet for the idle timeout, and its window closes
	// when the partition has been quiet for the rest of it. An idle timeout
	// shorter than the window leaves it pending for a few scrapes.
	cfg.Detect.IdleTimeout = 2 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// A first run on the data dir, stopped cleanly: the run under test
	// starts after a downtime, as a deployed serve does, so that the
	// downtime panels have data (a first start has none).
	if first, err := startServer(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	} else if err := first.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s := startTest(t, cfg)
	lines := prometheusCapture(t)
	last := uncertainWriteAfter(t, lines[len(lines)-1])
	phase("mcpaudit serve started, capture built")

	o := rules.DefaultOptions()
	o.ForOverride = time.Second
	// The capture is dated 2026-11-01, and the finding alerts are about now:
	// they ignore findings whose event time is older than FindingMaxAge
	// (rules/testdata/rules_test.yaml shows it). Replaying an old capture on
	// purpose, this test moves the bound back past it.
	o.FindingMaxAge = time.Since(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) + 24*time.Hour
	// Every for: is 1s, but McpAuditCollectorDown's: it is about scrapes
	// failing, and Prometheus' scrape timeout here is the 1s interval. At
	// 1s it fired on two or three scrapes in a row that a loaded box
	// answered after more than 1s of wall clock (flk49's run at load
	// 25-30: "unexpected alert McpAuditCollectorDown firing"), which the
	// test took for every scrape answering within 1s. The rule's 5m at
	// the README's 15s interval (10s timeout) is 20 failed scrapes in a
	// row; here 10 in a row. Stopping serve still fires it (collector_down).
	rf, rulesPath := writeRules(t, o, map[string]time.Duration{"McpAuditCollectorDown": collectorDownFor})
	prom := promtest.Start(t, promtest.Config{
		Target: "http://" + s.apiAddr + "/metrics", Job: o.Job, RuleFiles: []string{rulesPath}, Interval: time.Second,
	})
	// About 5s: Prometheus applies new scrape targets at most every 5s.
	if err := prom.WaitUp(ctx, o.Job, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	phase("prometheus up, scraping mcpaudit serve")

	// value polls until expr has one sample for which ok holds.
	value := func(what, expr string, timeout time.Duration, ok func(float64) bool) float64 {
		t.Helper()
		var last float64
		err := promtest.Poll(ctx, timeout, func(ctx context.Context) (bool, error) {
			r, err := prom.Query(ctx, expr)
			if err != nil || len(r.Samples) != 1 {
				return false, err
			}
			last, err = strconv.ParseFloat(r.Samples[0].Value, 64)
			return err == nil && ok(last), err
		})
		if err != nil {
			t.Fatalf("%s: %v (last value %v)\n%s", what, err, last, expr)
		}
		return last
	}
	// Records of the calls_http source that Prometheus has seen, whatever
	// their result: it shows that a scrape followed a request.
	ingested := fmt.Sprintf(`sum(%s{%s="%s"})`, metrics.IngestRecordsTotal, metrics.LabelSource, metrics.SourceCallsHTTP)
	posted := 0
	post := func(batch [][]byte, gz bool) {
		t.Helper()
		resp := postCalls(t, s, append(bytes.Join(batch, []byte("\n")), '\n'), gz)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var cr receiver.CallsResponse
		if resp.StatusCode != 200 || json.Unmarshal(b, &cr) != nil || cr.Accepted+cr.Rejected != len(batch) {
			t.Fatalf("POST /v1/calls of %d lines: %s %s", len(batch), resp.Status, b)
		}
		posted += len(batch)
		value("scrape after the batch", ingested, 10*time.Second, func(v float64) bool { return v >= float64(posted) })
	}

	// A first small batch makes both servers known, so that their findings
	// counters and pending gauges exist at zero before the anomalies; the
	// rest follows in batches, each scraped before the next is sent.
	warm := 0
	for seen := map[string]bool{}; len(seen) < 2 || warm < 10; warm++ {
		var r struct{ Server string }
		if json.Unmarshal(lines[warm], &r) == nil && r.Server != "" {
			seen[r.Server] = true
		}
	}
	post(lines[:warm], false)
	value("both servers in the metrics", fmt.Sprintf("count(count by (%s) (%s))", metrics.LabelServer, metrics.FindingsTotal),
		10*time.Second, func(v float64) bool { return v == 2 })
	rest := lines[warm:]
	const batches = 6
	for i := range batches {
		post(rest[i*len(rest)/batches:(i+1)*len(rest)/batches], i%2 == 1)
	}
	phase(fmt.Sprintf("replayed %d lines in %d batches", len(lines), batches+1))

	// Every write of the capture is settled by the calls after it in event
	// time (each part ends with a harmless call long after the rest).
	value("no write pending after the capture", "sum("+metrics.WritesPending+")", 10*time.Second, func(v float64) bool { return v == 0 })
	// One more uncertain write, with nothing after it, stays pending until
	// the wall clock closes its verification window: it must then count as
	// unverified, with its finding.
	post([][]byte{last}, false)
	value("the last write pending", "sum("+metrics.WritesPending+")", 10*time.Second, func(v float64) bool { return v == 1 })
	phase("last write pending")

	value("pending writes drain", "sum("+metrics.WritesPending+")", 20*time.Second, func(v float64) bool { return v == 0 })
	phase("the wall clock closed the last window")
	var fp audit.FindingPage
	getJSON(t, "http://"+s.apiAddr+"/api/v1/findings?kind=unverified_write&document="+url.QueryEscape(wallClockDoc), &fp)
	if len(fp.Findings) != 1 {
		t.Errorf("findings of the last write: %+v, want one unverified_write", fp.Findings)
	}

	// The write counters Prometheus scraped, each write once by its latest
	// state (mcpaudit_writes_total less mcpaudit_writes_rejudged_total of
	// the state it left, as the SLI's rules count them), agree with the
	// store's counts that /api/v1/slo and `mcpaudit report` give, per server
	// and state (rev20s, review of sli20).
	var promWrites, apiWrites map[string]float64
	var moves float64
	err := promtest.Poll(ctx, 20*time.Second, func(ctx context.Context) (bool, error) {
		entered, err := prom.Query(ctx, fmt.Sprintf("sum by (%s, %s) (%s)", metrics.LabelServer, metrics.LabelState, metrics.WritesTotal))
		if err != nil {
			return false, err
		}
		left, err := prom.Query(ctx, fmt.Sprintf("sum by (%s, %s) (%s)", metrics.LabelServer, metrics.LabelFrom, metrics.WritesRejudgedTotal))
		if err != nil {
			return false, err
		}
		promWrites = map[string]float64{}
		for _, sm := range entered.Samples {
			v, _ := strconv.ParseFloat(sm.Value, 64)
			promWrites[sm.Metric[metrics.LabelServer]+"/"+sm.Metric[metrics.LabelState]] += v
		}
		moves = 0
		for _, sm := range left.Samples {
			v, _ := strconv.ParseFloat(sm.Value, 64)
			promWrites[sm.Metric[metrics.LabelServer]+"/"+sm.Metric[metrics.LabelFrom]] -= v
			moves += v
		}
		maps.DeleteFunc(promWrites, func(_ string, v float64) bool { return v == 0 })
		apiWrites = map[string]float64{}
		for _, sv := range []string{"oddlynew", "thegram"} {
			var rep struct {
				Counts map[audit.WriteState]int64 `json:"counts"`
			}
			getJSON(t, "http://"+s.apiAddr+"/api/v1/slo?window=365d&server="+sv, &rep)
			for st, n := range rep.Counts {
				if n != 0 {
					apiWrites[sv+"/"+string(st)] = float64(n)
				}
			}
		}
		return maps.Equal(promWrites, apiWrites), nil
	})
	if err != nil {
		t.Errorf("writes by server and latest state in Prometheus %v, in /api/v1/slo %v: %v", promWrites, apiWrites, err)
	} else {
		t.Logf("writes by server and latest state, Prometheus and /api/v1/slo: %v (%v moves subtracted)", promWrites, moves)
	}

	// The findings counters Prometheus scraped agree with the findings the
	// API returns, per server and kind.
	apiCount := map[string]float64{}
	var promCount map[string]float64
	err = promtest.Poll(ctx, 20*time.Second, func(ctx context.Context) (bool, error) {
		clear(apiCount)
		for _, f := range apiFindingsAll(t, s) {
			apiCount[string(f.Server)+"/"+string(f.Kind)]++
		}
		r, err := prom.Query(ctx, fmt.Sprintf("sum by (%s, %s) (%s) > 0", metrics.LabelServer, metrics.LabelKind, metrics.FindingsTotal))
		if err != nil {
			return false, err
		}
		promCount = map[string]float64{}
		for _, sm := range r.Samples {
			v, _ := strconv.ParseFloat(sm.Value, 64)
			promCount[sm.Metric[metrics.LabelServer]+"/"+sm.Metric[metrics.LabelKind]] = v
		}
		return maps.Equal(apiCount, promCount), nil
	})
	if err != nil {
		t.Fatalf("%s by server and kind in Prometheus %v, in the API %v: %v", metrics.FindingsTotal, promCount, apiCount, err)
	}
	// The capture holds anomalies of every kind.
	serversWith := func(k audit.Kind) []string {
		var out []string
		for _, sv := range []string{"oddlynew", "thegram"} {
			if apiCount[sv+"/"+string(k)] > 0 {
				out = append(out, sv)
			}
		}
		return out
	}
	for _, k := range audit.Kinds {
		if len(serversWith(k)) == 0 {
			t.Errorf("the capture gave no %s finding", k)
		}
	}
	phase(fmt.Sprintf("findings counters agree with the API: %v", apiCount))

	// The alerts of the capture's anomalies fire for the servers that have
	// them. Alerts with a server label list their servers; the others "".
	both := []string{"oddlynew", "thegram"}
	want := map[string][]string{
		"McpAuditDoubleAppliedWrite":         serversWith(audit.KindDoubleAppliedWrite),
		"McpAuditDuplicateCreate":            serversWith(audit.KindDuplicateCreate),
		"McpAuditIntegrityFailure":           serversWith(audit.KindIntegrityFailure),
		"McpAuditUnsafeRetries":              serversWith(audit.KindUnsafeRetry),
		"McpAuditUnverifiedWrites":           both,
		"McpAuditUncertainOutcomes":          both,
		"McpAuditWastedRetries":              {"oddlynew"}, // the retry storm; thegram stays near 1%
		"McpAuditWriteErrorBudgetBurnFast":   both,
		"McpAuditWriteErrorBudgetBurnMedium": both,
		"McpAuditWriteErrorBudgetBurnSlow":   both,
		"McpAuditIngestRejections":           {""},
	}
	var alerts []promtest.Alert
	firing := func(name string) []string {
		set := map[string]bool{}
		for _, a := range alerts {
			if a.State == "firing" && a.Labels["alertname"] == name {
				set[a.Labels[metrics.LabelServer]] = true
			}
		}
		return slices.Sorted(maps.Keys(set))
	}
	err = promtest.Poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		a, err := prom.Alerts(ctx)
		if err != nil {
			return false, err
		}
		alerts = a
		for name, servers := range want {
			if !slices.Equal(firing(name), servers) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var diff []string
		for _, name := range slices.Sorted(maps.Keys(want)) {
			if got := firing(name); !slices.Equal(got, want[name]) {
				diff = append(diff, fmt.Sprintf("%s fires for %q, want %q", name, got, want[name]))
			}
		}
		t.Fatalf("alerts: %v\n%s", err, strings.Join(diff, "\n"))
	}
	for _, a := range alerts {
		if a.State != "firing" {
			continue
		}
		name := a.Labels["alertname"]
		if _, ok := want[name]; !ok && name != "McpAuditWritesPendingNotDraining" {
			// Pending writes do not drain between the first scrapes, before
			// any window closes; every other alert is unexpected.
			t.Errorf("unexpected alert %s firing: %v", name, a.Labels)
			if name == "McpAuditCollectorDown" {
				failed, _ := prom.Query(ctx, fmt.Sprintf(`count_over_time(up{job=%q}[1h]) - sum_over_time(up{job=%q}[1h])`, o.Job, o.Job))
				longest, _ := prom.Query(ctx, fmt.Sprintf(`max_over_time(scrape_duration_seconds{job=%q}[1h])`, o.Job))
				t.Errorf("scrapes of serve failed: %v; the longest took %v s (the scrape timeout is 1s)", failed.Samples, longest.Samples)
			}
		}
		if a.Labels["severity"] == "" || a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
			t.Errorf("%s: severity, summary or description missing: %+v", name, a)
		}
	}
	if got := firing("McpAuditUncertainOutcomes"); len(got) > 0 {
		// By retry action: thegram's COMMIT_UNKNOWN is replay_same_request,
		// oddlynew's in_flight_unknown verify_then_decide.
		actions := map[string]bool{}
		for _, a := range alerts {
			if a.State == "firing" && a.Labels["alertname"] == "McpAuditUncertainOutcomes" {
				actions[a.Labels[metrics.LabelServer]+" "+a.Labels[metrics.LabelRetryAction]] = true
			}
		}
		if !actions["thegram replay_same_request"] || !actions["oddlynew verify_then_decide"] {
			t.Errorf("McpAuditUncertainOutcomes fires for %v, want thegram replay_same_request and oddlynew verify_then_decide", actions)
		}
	}
	phase("alerts of the anomalies firing")

	t.Run("rule_expressions", func(t *testing.T) {
		for _, r := range rf.Records() {
			res, err := prom.Query(ctx, r.Record)
			if err != nil {
				t.Errorf("%s: %v", r.Record, err)
			} else if len(res.Samples) == 0 {
				t.Errorf("recording rule %s has no samples", r.Record)
			}
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if _, err := prom.Query(ctx, r.Expr); err != nil {
					t.Errorf("%s%s: %v\n%s", r.Record, r.Alert, err, r.Expr)
				}
			}
		}
	})

	t.Run("dashboard_queries", func(t *testing.T) {
		files, err := dashboards.Render()
		if err != nil {
			t.Fatal(err)
		}
		vars := map[string]string{
			// Wide enough to cover the whole replay however slow the machine.
			"__rate_interval":        "5m",
			"__interval":             "15s",
			"__range":                "1h",
			dashboards.VarServer:     ".*",
			dashboards.VarJob:        o.Job,
			dashboards.VarDatasource: "prometheus",
		}
		// What some panels must break down to, by legend label value.
		breakdown := map[string]struct {
			label  string
			values []string
		}{
			"Calls by outcome": {metrics.LabelOutcome, []string{
				string(audit.OutcomeOK), string(audit.OutcomeToolError), string(audit.OutcomeNoResponse)}},
			"Writes by state": {metrics.LabelState, []string{
				string(audit.StateDurable), string(audit.StateUnverified), string(audit.StateDoubleApplied)}},
			"Findings by kind": {metrics.LabelKind, kindStrings(audit.Kinds)},
			"Failures by retry action": {metrics.LabelRetryAction, []string{
				string(audit.ActionReplaySameRequest), string(audit.ActionVerifyThenDecide),
				string(audit.ActionFixInput), string(audit.ActionEscalate)}},
		}
		// Panels of the ClickHouse store's spool, which this serve (the
		// embedded store) does not export; TestServe_ClickHouseSpoolFileRejected
		// reads the series from a ClickHouse store.
		spoolOnly := map[string]bool{"Spool files set aside": true, "Acknowledged calls waiting for the store": true}
		checked := map[string]bool{}
		n := 0
		for _, name := range slices.Sorted(maps.Keys(files)) {
			if name == dashboards.UIDRelays+".json" {
				// The relays' board reads the metrics of mcpaudit proxy
				// and wrap, which serve does not export: rules/promtest
				// runs its queries against a relay's registry.
				continue
			}
			qs, err := dashboards.Queries(files[name])
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range qs {
				n++
				expr := dashboards.Expand(q.Expr, vars)
				if strings.Contains(expr, "$") {
					t.Errorf("%s / %s: variable left unexpanded\n%s", q.Dashboard, q.Panel, expr)
					continue
				}
				res, err := prom.Query(ctx, expr)
				if err != nil {
					t.Errorf("%s / %s: %v\n%s", q.Dashboard, q.Panel, err, expr)
					continue
				}
				if spoolOnly[q.Panel] {
					// The embedded store has no spool: nothing to show.
					if len(res.Samples) != 0 {
						t.Errorf("%s / %s: data from the embedded store\n%s", q.Dashboard, q.Panel, expr)
					}
					continue
				}
				if len(res.Samples) == 0 {
					t.Errorf("%s / %s: no data\n%s", q.Dashboard, q.Panel, expr)
					continue
				}
				b, ok := breakdown[q.Panel]
				if !ok {
					continue
				}
				checked[q.Panel] = true
				shown := map[string]bool{}
				for _, sm := range res.Samples {
					if v, _ := strconv.ParseFloat(sm.Value, 64); v > 0 {
						shown[sm.Metric[b.label]] = true
					}
				}
				for _, v := range b.values {
					if !shown[v] {
						t.Errorf("%s / %s: no %s=%q above zero; shown %v", q.Dashboard, q.Panel, b.label, v, slices.Sorted(maps.Keys(shown)))
					}
				}
			}
		}
		for p := range breakdown {
			if !checked[p] {
				t.Errorf("no dashboard panel %q with data", p)
			}
		}
		t.Logf("%d panel queries ran", n)
	})
	phase("rule and dashboard queries ran")

	t.Run("collector_down", func(t *testing.T) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		if _, err := prom.WaitFiring(ctx, []string{"McpAuditCollectorDown"}, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	phase("McpAuditCollectorDown firing after shutdown")
}

// prometheusCapture is the capture of TestServe_Prometheus, as NDJSON lines
// in event-time order: a capgen capture, half of whose sessions are
// anomalies (with duplicate observations and a few percent of bad lines);
// then a retry storm, forty Oddlynew copies re-planned although blocked,
// which puts Oddlynew's wasted retries well above McpAuditWastedRetries'
// 5% of calls; then the example captures. Each part ends with a harmless
// call minutes after the rest, so event time settles every write of it.
func prometheusCapture(t *testing.T) [][]byte {
	t.Helper()
	c := capgen.Generate(capgen.Config{
		Seed: 4, Sessions: 300, Start: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC), Span: 30 * time.Minute,
		AnomalyRate: 0.5, NoiseRate: 0.1,
	})
	if c.BadLines == 0 {
		t.Fatal("capgen gave no bad lines")
	}
	lines := slices.Clone(c.Lines)

	raw, err := os.ReadFile("../../testdata/examples/oddlynew-copy-blocked-replay.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	storm := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))[:2] // the plan, then the identical re-plan
	const copyID = "01a19b7c-a680-76ae-b358-d371cf123e51"
	if !bytes.Contains(storm[0], []byte(copyID)) || !bytes.Contains(storm[1], []byte(copyID)) {
		t.Fatal("the example oddlynew-copy-blocked-replay changed")
	}
	var first time.Time
	for k := range 40 {
		at := time.Date(2026, 11, 1, 11, 0, 0, 0, time.UTC).Add(time.Duration(k) * 30 * time.Second)
		for _, l := range storm {
			l = bytes.ReplaceAll(l, []byte(copyID), fmt.Appendf(nil, "01a19b7c-a680-76ae-b358-%012x", k))
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatal(err)
			}
			tm, _ := time.Parse(time.RFC3339Nano, m["time"].(string))
			if first.IsZero() {
				first = tm
			}
			m["time"] = at.Add(tm.Sub(first)).Format(time.RFC3339Nano)
			m["session"] = fmt.Sprintf("s-storm-%d", k)
			b, _ := json.Marshal(m)
			lines = append(lines, b)
		}
	}

	for _, m := range mergedCapture(t) {
		b, _ := json.Marshal(m)
		lines = append(lines, b)
	}
	return lines
}

// wallClockDoc is the document of the write that uncertainWriteAfter makes.
const wallClockDoc = "ops/wall-clock-0c10c4.gram"

// uncertainWriteAfter returns a Thegram patch that ends in COMMIT_UNKNOWN,
// two hours after the call record after (beyond every window of the calls
// before it).
func uncertainWriteAfter(t *testing.T, after []byte) []byte {
	t.Helper()
	var prev struct{ Time time.Time }
	if err := json.Unmarshal(after, &prev); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../testdata/examples/thegram-commit-unknown-abandoned.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	l := bytes.Split(raw, []byte("\n"))[1] // the patch; then reads and a tail, left out
	l = bytes.ReplaceAll(l, []byte("team/faq-f6403d.gram"), []byte(wallClockDoc))
	l = bytes.ReplaceAll(l, []byte("req-60da64e611bd"), []byte("req-0c10c4c10c4c"))
	var m map[string]any
	if err := json.Unmarshal(l, &m); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(l, []byte("COMMIT_UNKNOWN")) || !bytes.Contains(l, []byte(wallClockDoc)) {
		t.Fatalf("the example changed: %s", l)
	}
	m["time"] = prev.Time.Add(2 * time.Hour).Format(time.RFC3339Nano)
	m["session"] = "s-wall-clock"
	b, _ := json.Marshal(m)
	return b
}

// apiFindingsAll reads every finding from the API, in pages of 500.
func apiFindingsAll(t *testing.T, s *server) []audit.Finding {
	t.Helper()
	var all []audit.Finding
	cursor := ""
	for range 1000 {
		u := "http://" + s.apiAddr + "/api/v1/findings?limit=500"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		var page audit.FindingPage
		getJSON(t, u, &page)
		all = append(all, page.Findings...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
	t.Fatal("pagination does not end")
	return nil
}

func kindStrings(ks []audit.Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	sort.Strings(out)
	return out
}

// writeRules writes the rules of o to a file for a Prometheus to load,
// with the for: of the alerts named in fors set to theirs, and returns
// them and its path.
func writeRules(t *testing.T, o rules.Options, fors map[string]time.Duration) (*rules.File, string) {
	t.Helper()
	rf, err := rules.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range rf.Groups {
		for i, r := range g.Rules {
			if d, ok := fors[r.Alert]; ok {
				g.Rules[i].For = rules.Duration(d)
				delete(fors, r.Alert)
			}
		}
	}
	if len(fors) > 0 {
		t.Fatalf("no alerts %v in the rules", slices.Collect(maps.Keys(fors)))
	}
	rb, err := rf.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, rb, 0o644); err != nil {
		t.Fatal(err)
	}
	return rf, path
}
