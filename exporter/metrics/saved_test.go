package metrics

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpaudit/mcpaudit/audit"
)

// savedFinding is a finding of server thegram-s.
func savedFinding(kind audit.Kind) *audit.Finding {
	return &audit.Finding{Kind: kind, Severity: kind.Severity(), Server: "thegram-s", Time: time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)}
}

func findingsOf(m *Metrics, kind audit.Kind) float64 {
	return testutil.ToFloat64(m.findings.WithLabelValues("thegram-s", string(kind), string(kind.Severity())))
}

func withdrawnOf(m *Metrics, kind audit.Kind) float64 {
	return testutil.ToFloat64(m.withdrawn.WithLabelValues("thegram-s", string(kind), string(kind.Severity())))
}

// TestSaveCounts_ShownOnceSaved: with the counts gated, a finding (and a
// withdrawal) is out of its series until SaveCounts' publish runs, and the
// values saved are what a new Metrics begins at: a scrape never shows more
// than the next start begins at.
func TestSaveCounts_ShownOnceSaved(t *testing.T) {
	m, err := New(prometheus.NewRegistry(), Options{Servers: []string{"thegram-s"}})
	if err != nil {
		t.Fatal(err)
	}
	m.GateOnSave()
	f := savedFinding(audit.KindDoubleAppliedWrite)
	m.Finding(f)
	m.Finding(f)
	m.WithdrawFinding(f, "c1", f.Time)
	if got := findingsOf(m, audit.KindDoubleAppliedWrite); got != 0 {
		t.Fatalf("before a save the series shows %v, want 0", got)
	}
	if !m.CountsPending() {
		t.Fatal("CountsPending is false with counts waiting")
	}
	b, publish := m.SaveCounts(true)
	if got := findingsOf(m, audit.KindDoubleAppliedWrite); got != 0 {
		t.Fatalf("saved but not published, the series shows %v, want 0", got)
	}
	publish()
	if got, w := findingsOf(m, audit.KindDoubleAppliedWrite), withdrawnOf(m, audit.KindDoubleAppliedWrite); got != 2 || w != 1 {
		t.Fatalf("published, the series show %v and %v withdrawn, want 2 and 1", got, w)
	}
	if m.CountsPending() {
		t.Fatal("CountsPending is true after the save")
	}
	// A count made after the snapshot waits for the next one.
	b2, publish2 := m.SaveCounts(true)
	publish2()
	if string(b2) != string(b) {
		t.Errorf("a second save with no new count saved %s, the first %s", b2, b)
	}

	m2, err := New(prometheus.NewRegistry(), Options{FirstScrapeWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m2.GateOnSave()
	if err := m2.RestoreCounts(b); err != nil {
		t.Fatal(err)
	}
	if got, w := findingsOf(m2, audit.KindDoubleAppliedWrite), withdrawnOf(m2, audit.KindDoubleAppliedWrite); got != 2 || w != 1 {
		t.Fatalf("restored from %s, the series show %v and %v withdrawn, want 2 and 1 at once", b, got, w)
	}
	// Every kind's series exist at zero beside them, as at a first event.
	if n := testutil.CollectAndCount(m2.findings); n != len(audit.Kinds) {
		t.Errorf("restored, %d findings series, want %d", n, len(audit.Kinds))
	}
	// The restored server took its label; a later finding counts on it.
	m2.Finding(f)
	_, publish3 := m2.SaveCounts(true)
	publish3()
	if got := findingsOf(m2, audit.KindDoubleAppliedWrite); got != 3 {
		t.Errorf("a finding after the restore: %v, want 3", got)
	}
}

// TestRestoreCounts_HeldStaysHeld: a server whose first counts no scrape
// had shown is saved as held; the restore makes its series at zero and
// holds the counts for the scrapers again, and their release, too, waits
// for a save. A server saved as shown goes on at its value even when the
// start made its series held first (SeedLastFindings).
func TestRestoreCounts_HeldStaysHeld(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{FirstScrapeWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.GateOnSave()
	m.Finding(savedFinding(audit.KindWastedRetry))
	b, publish := m.SaveCounts(true)
	publish()
	if !strings.Contains(string(b), `"held":true`) || findingsOf(m, audit.KindWastedRetry) != 0 {
		t.Fatalf("a new server's first count: saved %s, shown %v; want held, 0", b, findingsOf(m, audit.KindWastedRetry))
	}

	reg2 := prometheus.NewRegistry()
	m2, err := New(reg2, Options{FirstScrapeWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m2.GateOnSave()
	if err := m2.RestoreCounts(b); err != nil {
		t.Fatal(err)
	}
	if got := findingsOf(m2, audit.KindWastedRetry); got != 0 {
		t.Fatalf("restored held, the series shows %v before any scrape, want 0", got)
	}
	if _, err := m2.Scraper(reg2).Gather(); err != nil {
		t.Fatal(err)
	}
	if got := findingsOf(m2, audit.KindWastedRetry); got != 0 || !m2.CountsPending() {
		t.Fatalf("released by a scrape, before a save: shown %v, pending %v; want 0, true", got, m2.CountsPending())
	}
	b2, publish2 := m2.SaveCounts(true)
	publish2()
	if got := findingsOf(m2, audit.KindWastedRetry); got != 1 || strings.Contains(string(b2), `"held":true`) {
		t.Fatalf("released and saved: shown %v, saved %s; want 1, not held", got, b2)
	}

	// Saved as shown, made held by the seed of the last finding gauge
	// before the restore: shown at once.
	m3, err := New(prometheus.NewRegistry(), Options{FirstScrapeWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m3.GateOnSave()
	m3.SeedLastFindings([]audit.FindingTime{{Server: "thegram-s", Kind: audit.KindWastedRetry, Time: time.Now()}})
	if err := m3.RestoreCounts(b2); err != nil {
		t.Fatal(err)
	}
	if got := findingsOf(m3, audit.KindWastedRetry); got != 1 {
		t.Fatalf("saved as shown, restored after the seed: shown %v, want 1 at once", got)
	}
}

// TestRestoreCounts_Bounded: what a state file holds is restored only as
// label values the counters use: another kind or severity, a value that
// is not a positive number, and servers past max_servers (under "other")
// make no series of their own; a file that is not JSON restores nothing.
func TestRestoreCounts_Bounded(t *testing.T) {
	m, err := New(prometheus.NewRegistry(), Options{MaxServers: 1})
	if err != nil {
		t.Fatal(err)
	}
	sc := savedCounts{Servers: []savedServer{
		{Server: "a", Findings: map[string]float64{"wasted_retry/info": 2, "made_up/info": 5, "wasted_retry/fatal": 5, "unsafe_retry/warning": -3, "wasted_retry": 7}},
		{Server: "b", Findings: map[string]float64{"wasted_retry/info": 4}},
	}}
	b, _ := json.Marshal(sc)
	if err := m.RestoreCounts(b); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.findings.WithLabelValues("a", "wasted_retry", "info")); got != 2 {
		t.Errorf("a: %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.findings.WithLabelValues(Other, "wasted_retry", "info")); got != 4 {
		t.Errorf("b past max_servers under other: %v, want 4", got)
	}
	if n := testutil.CollectAndCount(m.findings); n != 2*len(audit.Kinds) {
		t.Errorf("%d findings series, want %d (two labels, every kind at its severity)", n, 2*len(audit.Kinds))
	}
	if err := m.RestoreCounts(json.RawMessage(`{"servers":`)); err == nil {
		t.Error("a cut file restored without an error")
	}
}

// BenchmarkSaveCounts measures what the state file's save of the findings
// counters costs with every server label in use (the default max_servers,
// 100, and other) and every kind counted and withdrawn on each: the time
// of one SaveCounts and its publish, and the bytes it adds to the file.
func BenchmarkSaveCounts(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	m.GateOnSave()
	for i := range 101 {
		for _, k := range audit.Kinds {
			f := &audit.Finding{Kind: k, Server: fmt.Sprintf("server-%03d", i), Time: time.Now()}
			m.Finding(f)
			m.WithdrawFinding(f, "c", f.Time)
		}
	}
	var size int
	for b.Loop() {
		m.Finding(&audit.Finding{Kind: audit.KindWastedRetry, Server: "server-000", Time: time.Now()})
		v, publish := m.SaveCounts(true)
		publish()
		size = len(v)
	}
	b.ReportMetric(float64(size), "bytes")
}

// BenchmarkSaveCountsCalls measures what the state file's save costs
// with the call and write counters saved too (rcn49): every server label
// in use (101: the default max_servers and other), each with tools tools
// whose every outcome, uncertain failure, terminal state and move was
// counted, and every kind of finding counted and withdrawn. changed is
// the number of servers with a new count before each save (the others'
// bytes are reused): 1, or all of them (traffic to every server within
// the second between two saves).
func BenchmarkSaveCountsCalls(b *testing.B) {
	for _, tc := range []struct{ tools, changed int }{{8, 1}, {8, 101}, {64, 1}, {64, 101}} {
		b.Run(fmt.Sprintf("tools=%d/changed=%d", tc.tools, tc.changed), func(b *testing.B) {
			m, err := New(prometheus.NewRegistry(), Options{KnownCode: func(string) bool { return true }})
			if err != nil {
				b.Fatal(err)
			}
			m.GateOnSave()
			at := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
			for i := range 101 {
				server := fmt.Sprintf("server-%03d", i)
				for _, k := range audit.Kinds {
					f := &audit.Finding{Kind: k, Server: server, Time: at}
					m.Finding(f)
					m.WithdrawFinding(f, "c", f.Time)
				}
				for j := range tc.tools {
					tool := fmt.Sprintf("tool_%02d", j)
					for _, o := range []audit.Outcome{audit.OutcomeOK, audit.OutcomeToolError, audit.OutcomeProtocolError, audit.OutcomeNoResponse} {
						r := &audit.Record{Call: &audit.Call{Server: server}, Tool: tool, Outcome: o}
						if o == audit.OutcomeToolError {
							r.Failure = &uncertainFailures[j%2]
						}
						m.Call(r)
					}
					w := &audit.Write{Server: server, Tool: tool, Time: at, StateTime: at}
					for _, st := range terminalStates {
						w.State = st
						m.Write(w, "")
					}
					for _, mv := range Rejudgements {
						w.State = mv[1]
						m.Write(w, mv[0])
					}
				}
			}
			_, publish := m.SaveCounts(true) // every server computed once
			publish()
			var size int
			for b.Loop() {
				for i := range tc.changed {
					m.Call(&audit.Record{Call: &audit.Call{Server: fmt.Sprintf("server-%03d", i)}, Tool: "tool_00", Outcome: audit.OutcomeOK})
				}
				v, publish := m.SaveCounts(true)
				publish()
				size = len(v)
			}
			b.ReportMetric(float64(size), "bytes")
		})
	}
}

// TestSaveCounts_CallsAndWrites: the calls, failures and write states go
// on across a restart as the findings do (rcn49): gated until a save
// holds them, restored at their values by tool, a tool whose first counts
// no scrape showed held again, and nothing counted while SkipCounts is
// set (but the pending gauge). A file of the release before (findings
// only) restores no call series.
func TestSaveCounts_CallsAndWrites(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{FirstScrapeWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.GateOnSave()
	at := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
	call := func(m *Metrics, tool string, o audit.Outcome, f *audit.Failure) {
		m.Call(&audit.Record{Call: &audit.Call{Server: "thegram-s"}, Tool: tool, Outcome: o, Failure: f})
	}
	call(m, "gram_patch", audit.OutcomeOK, nil)
	call(m, "gram_patch", audit.OutcomeToolError, &audit.Failure{Code: "COMMIT_UNKNOWN", Action: audit.ActionReplaySameRequest})
	w := &audit.Write{Server: "thegram-s", Tool: "gram_patch", Time: at, StateTime: at, State: audit.StateUnverified}
	m.Write(w, "")
	w.State = audit.StateDurable
	m.Write(w, audit.StateUnverified)
	calls := func(m *Metrics, tool, outcome string) float64 {
		return testutil.ToFloat64(m.calls.WithLabelValues("thegram-s", tool, outcome))
	}
	// Shown by a scrape at zero, then released: waiting for a save.
	if _, err := m.Scraper(reg).Gather(); err != nil {
		t.Fatal(err)
	}
	if got := calls(m, "gram_patch", "ok"); got != 0 || !m.CountsPending() {
		t.Fatalf("released, before a save: %v shown, pending %v; want 0, true", got, m.CountsPending())
	}
	b, publish := m.SaveCounts(true)
	publish()
	if got := calls(m, "gram_patch", "ok"); got != 1 {
		t.Fatalf("saved: %v shown, want 1", got)
	}
	// A second tool's first call, not shown by any scrape: saved held.
	call(m, "gram_read", audit.OutcomeOK, nil)
	b, publish = m.SaveCounts(true)
	publish()
	for _, want := range []string{`"gram_patch":{"calls":{"ok":1,"tool_error":1},"failures":{"COMMIT_UNKNOWN/replay_same_request":1},"writes":{"durable":1,"unverified":1},"rejudged":{"unverified/durable":1}}`,
		`"gram_read":{"calls_held":true,"calls":{"ok":1}}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("saved %s, want it to hold %s", b, want)
		}
	}

	reg2 := prometheus.NewRegistry()
	m2, err := New(reg2, Options{FirstScrapeWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m2.GateOnSave()
	if err := m2.RestoreCounts(b); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		got  float64
		want float64
	}{
		{"gram_patch ok", calls(m2, "gram_patch", "ok"), 1},
		{"gram_patch tool_error", calls(m2, "gram_patch", "tool_error"), 1},
		{"gram_patch COMMIT_UNKNOWN", testutil.ToFloat64(m2.failures.WithLabelValues("thegram-s", "gram_patch", "COMMIT_UNKNOWN", "replay_same_request")), 1},
		{"gram_patch durable", testutil.ToFloat64(m2.writes.WithLabelValues("thegram-s", "gram_patch", "durable")), 1},
		{"gram_patch unverified to durable", testutil.ToFloat64(m2.rejudged.WithLabelValues("thegram-s", "gram_patch", "unverified", "durable")), 1},
		{"gram_read ok (held)", calls(m2, "gram_read", "ok"), 0},
	} {
		if c.got != c.want {
			t.Errorf("restored, %s: %v, want %v", c.what, c.got, c.want)
		}
	}
	// The replay of a call the values hold: no count, the pending gauge
	// goes on.
	m2.SkipCounts(true)
	call(m2, "gram_patch", audit.OutcomeOK, nil)
	w.State = audit.StatePending
	m2.Write(w, "")
	w.State = audit.StateDurable
	m2.Write(w, audit.StatePending)
	w.State = audit.StatePending
	m2.Write(w, "")
	m2.SkipCounts(false)
	if m2.CountsPending() {
		t.Error("counts wait for a save after calls and writes told with SkipCounts")
	}
	if got := testutil.ToFloat64(m2.pending.WithLabelValues("thegram-s")); got != 1 {
		t.Errorf("pending gauge %v with SkipCounts, want 1", got)
	}
	call(m2, "gram_patch", audit.OutcomeOK, nil)
	_, publish = m2.SaveCounts(true)
	publish()
	if got := calls(m2, "gram_patch", "ok"); got != 2 {
		t.Errorf("a call after SkipCounts: %v, want 2", got)
	}

	// A file of alrt48's release: the findings only.
	m3, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m3.RestoreCounts(json.RawMessage(`{"servers":[{"server":"thegram-s","findings":{"wasted_retry/info":3}}]}`)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m3.calls); n != 0 {
		t.Errorf("restored from a file without calls: %d call series, want 0", n)
	}
}
