package promtest_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/dashboards"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/rules"
	"github.com/mcpaudit/mcpaudit/rules/promtest"
)

// TestEndToEnd scrapes a metrics registry fed with a realistic sequence of
// reports with a real Prometheus that loads the rules (every for: shortened
// to 1s), then runs every rule and dashboard query through the HTTP API and
// waits for the alerts of the anomalies fed to fire.
func TestEndToEnd(t *testing.T) {
	ctx := context.Background()
	reg := metrics.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{Servers: []string{"thegram", "oddlynew"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	target := httptest.NewServer(mux) // listens on 127.0.0.1
	defer target.Close()

	// A capture relay, exported by the same target here (in production
	// it is a job of its own): it relays and records, buffers records it
	// cannot deliver (the collector refuses its posts) and never sends one.
	relay, err := metrics.NewRelay(reg, "thegram")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		relay.Request(http.MethodPost, 200, time.Duration(i+1)*time.Millisecond)
		relay.Record("thegram", audit.OutcomeOK)
	}
	relay.Request(http.MethodGet, 502, 0)
	relay.Unrecorded(metrics.UnrecordedUnpaired)
	relay.SetInflight(2)
	relay.Forward(metrics.ForwardBuffered, 20)
	relay.Post(metrics.PostRetry)
	relay.SetBufferBytes(4096)

	f := &feeder{m: m, t0: time.Now().Add(-time.Hour)}
	f.baseline()
	// The pipeline's event-time status, as serve exports it: one partition
	// per server, an exporter each, the oddlynew one idle. Beside it, an
	// exporter whose clock is 10 minutes slow, quiet between its batches,
	// holds oddlynew at its lag (live22's S1): McpAuditSourceLagging fires
	// for oddlynew, though no source of it is active that far behind.
	if err := m.WatchPipeline(reg, func() []metrics.PartitionView {
		return []metrics.PartitionView{
			metrics.NewPartitionView("thegram", 1.5, true, 12, 3, 0, 1, []metrics.SourceView{{Name: "otlp:thegram", LagSeconds: 1}}),
			metrics.NewPartitionView("oddlynew", 601, true, 0, 0, 1, 0, []metrics.SourceView{{Name: "otlp:oddlynew", LagSeconds: 20, Idle: true},
				{Name: "otlp:oddlynew/slow", LagSeconds: 612, Idle: true, HoldLagSeconds: 600}}),
		}
	}); err != nil {
		t.Fatal(err)
	}
	// The listeners, as serve exports them.
	if err := metrics.WatchFrontDoor(reg, func() []metrics.ListenerView {
		return []metrics.ListenerView{{Name: metrics.ListenerIngest, Open: 3, Refused: 1}, {Name: metrics.ListenerGRPC, Open: 1}, {Name: metrics.ListenerAPI, Open: 2}}
	}, func() int64 { return 1 << 20 }); err != nil {
		t.Fatal(err)
	}

	// The store's faults, as serve exports them; both kinds of store at
	// once here (in production one store exports its own).
	st := &faultyStore{}
	if err := metrics.WatchStore(reg, st); err != nil {
		t.Fatal(err)
	}
	if err := metrics.WatchReady(reg, st); err != nil {
		t.Fatal(err)
	}
	// Withdrawals waiting for the store, as serve exports them (one
	// refused, retried at every commit).
	if err := metrics.WatchWithdrawals(reg, func() int { return 1 }); err != nil {
		t.Fatal(err)
	}

	// The downtimes the state file keeps, as serve exports them at start:
	// this start followed a clean stop, the one before it a crash (10
	// minutes ago), which McpAuditServeCrashed still tells.
	now := time.Now()
	if err := metrics.WatchDowntimes(reg, []audit.Downtime{
		{From: now.Add(-10 * time.Minute), To: now.Add(-9*time.Minute - 55*time.Second), End: audit.EndCrash},
		{From: now.Add(-2 * time.Minute), To: now.Add(-118 * time.Second), End: audit.EndStop},
	}, true); err != nil {
		t.Fatal(err)
	}

	o := rules.DefaultOptions()
	o.ForOverride = time.Second
	rf, err := rules.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := rf.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, b, 0o644); err != nil {
		t.Fatal(err)
	}

	prom := promtest.Start(t, promtest.Config{Target: target.URL + "/metrics", Job: o.Job, RuleFiles: []string{rulesPath}})
	if err := prom.WaitUp(ctx, o.Job, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	// Prometheus has now scraped the baseline: what follows is an increase.
	f.anomalies()
	relay.Forward(metrics.ForwardDropped, 3)
	relay.Forward(metrics.ForwardRejected, 1)
	st.idIndex.Add(1)
	st.spoolRejected.Add(1)
	st.idCorrupt.Add(1)
	st.tailsCut.Add(1)
	st.filesRejected.Add(1)
	st.spoolBytes.Store(700)
	st.unready.Store(true)
	f.m.IngestRejected(metrics.SourceOTLPHTTP, metrics.RejectStoreDown, 8)

	want := []string{
		"McpAuditWriteErrorBudgetBurnFast", "McpAuditWriteErrorBudgetBurnMedium", "McpAuditWriteErrorBudgetBurnSlow",
		"McpAuditDoubleAppliedWrite", "McpAuditDuplicateCreate", "McpAuditIntegrityFailure",
		"McpAuditUnverifiedWrites", "McpAuditWritesPendingNotDraining",
		"McpAuditUnsafeRetries", "McpAuditWastedRetries", "McpAuditUncertainOutcomes", "McpAuditIngestRejections",
		"McpAuditRelayDroppingRecords", "McpAuditRelayNotDelivering",
		"McpAuditSpoolFileRejected", "McpAuditIDIndexWriteFailures",
		"McpAuditIDIndexCorrupt", "McpAuditSpoolTailCut", "McpAuditSpoolFilesSetAside", "McpAuditSpoolFilling",
		"McpAuditStoreUnavailable", "McpAuditStoreRefusingCalls", "McpAuditServeCrashed",
		"McpAuditSourceLagging",
	}
	alerts, err := prom.WaitFiring(ctx, want, 90*time.Second)
	if err != nil {
		t.Fatalf("%v\nalerts: %+v", err, alerts)
	}
	for _, a := range alerts {
		if a.State != "firing" {
			continue
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if a.Annotations[k] == "" {
				t.Errorf("%s: no %s annotation", a.Labels["alertname"], k)
			}
		}
		if a.Labels["severity"] == "" {
			t.Errorf("%s: no severity", a.Labels["alertname"])
		}
	}
	firingFor := func(name string) map[string]bool {
		s := map[string]bool{}
		for _, a := range alerts {
			if a.State == "firing" && a.Labels["alertname"] == name {
				s[a.Labels["server"]] = true
			}
		}
		return s
	}
	if s := firingFor("McpAuditWritesPendingNotDraining"); !s["oddlynew"] || s["thegram"] {
		t.Errorf("McpAuditWritesPendingNotDraining fires for %v, want oddlynew (stuck) and not thegram (draining)", s)
	}
	if s := firingFor("McpAuditSourceLagging"); !s["oddlynew"] || s["thegram"] {
		t.Errorf("McpAuditSourceLagging fires for %v, want oddlynew (held by a quiet slow clock) and not thegram", s)
	}
	if s := firingFor("McpAuditDuplicateCreate"); !s["oddlynew"] || s["thegram"] {
		t.Errorf("McpAuditDuplicateCreate fires for %v, want only oddlynew", s)
	}

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
					t.Errorf("%s%s: %v", r.Record, r.Alert, err)
				}
			}
		}
	})

	t.Run("dashboard_queries", func(t *testing.T) {
		files, err := dashboards.Render()
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		vars := map[string]string{
			"__rate_interval":        "1m",
			"__interval":             "15s",
			"__range":                "1h",
			dashboards.VarServer:     ".*",
			dashboards.VarJob:        o.Job,
			dashboards.VarDatasource: "prometheus",
		}
		for _, n := range names {
			qs, err := dashboards.Queries(files[n])
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range qs {
				expr := dashboards.Expand(q.Expr, vars)
				res, err := prom.Query(ctx, expr)
				if err != nil {
					t.Errorf("%s / %s: %v\n%s", q.Dashboard, q.Panel, err, expr)
					continue
				}
				if len(res.Samples) == 0 {
					t.Errorf("%s / %s: no data\n%s", q.Dashboard, q.Panel, expr)
				}
			}
		}
	})

	t.Run("collector_down", func(t *testing.T) {
		target.Close()
		if _, err := prom.WaitFiring(ctx, []string{"McpAuditCollectorDown"}, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	})
}

// feeder plays the part of the detector and the receivers.
type feeder struct {
	m  *metrics.Metrics
	t0 time.Time
	n  int
}

func (f *feeder) call(server, tool string, outcome audit.Outcome, d time.Duration, fail *audit.Failure) {
	f.n++
	f.m.Call(&audit.Record{
		Call:    &audit.Call{ID: fmt.Sprintf("c_%d", f.n), Server: server, Tool: tool, Time: f.t0, Duration: d},
		Outcome: outcome,
		Tool:    tool,
		Failure: fail,
	})
}

// write reports the states of one write attempt, each verify later than the last.
func (f *feeder) write(server, tool string, verify time.Duration, states ...audit.WriteState) {
	w := &audit.Write{Server: server, Tool: tool, Time: f.t0, StateTime: f.t0}
	prev := audit.WriteState("")
	for i, s := range states {
		w.State = s
		if i > 0 {
			w.StateTime = w.StateTime.Add(verify)
		}
		f.m.Write(w, prev)
		prev = s
	}
}

func (f *feeder) finding(server string, k audit.Kind, n int) {
	for range n {
		f.m.Finding(&audit.Finding{Kind: k, Severity: k.Severity(), Server: server, Time: f.t0})
	}
}

// baseline is healthy traffic on both servers, plus one oddlynew write that
// stays pending for good.
func (f *feeder) baseline() {
	for i := range 20 {
		d := time.Duration(20+i*10) * time.Millisecond
		f.call("thegram", "gram_patch", audit.OutcomeOK, d, nil)
		f.write("thegram", "gram_patch", 0, audit.StateDurable)
		f.call("oddlynew", "run", audit.OutcomeOK, 2*d, nil)
		f.write("oddlynew", "documents.editDocument", 0, audit.StateDurable)
	}
	f.write("thegram", "gram_patch", 3*time.Second, audit.StatePending, audit.StateDurable)
	f.write("oddlynew", "documents.createDocument", 0, audit.StatePending)
	f.m.IngestAccepted(metrics.SourceOTLPHTTP, 40)
	f.m.IngestAccepted(metrics.SourceCallsHTTP, 40)
	f.m.ObserveStoreCommit(2 * time.Millisecond)
}

// anomalies is what the alerts are for.
func (f *feeder) anomalies() {
	commitUnknown := &audit.Failure{Code: "COMMIT_UNKNOWN", Action: audit.ActionReplaySameRequest}
	for i := range 20 {
		d := time.Duration(30+i*20) * time.Millisecond
		f.call("thegram", "gram_patch", audit.OutcomeOK, d, nil)
		f.write("thegram", "gram_patch", 0, audit.StateDurable)
		f.call("oddlynew", "run", audit.OutcomeOK, d, nil)
		f.write("oddlynew", "documents.editDocument", 0, audit.StateDurable)
	}
	for range 10 {
		// Uncertain commits that nobody resolves within their window.
		f.call("thegram", "gram_patch", audit.OutcomeToolError, 5*time.Second, commitUnknown)
		f.write("thegram", "gram_patch", 5*time.Minute, audit.StatePending, audit.StateUnverified)
	}
	f.call("thegram", "gram_create", audit.OutcomeToolError, 40*time.Millisecond,
		&audit.Failure{Code: "E_ARGUMENT", Action: audit.ActionFixInput})
	f.write("thegram", "gram_patch", 2*time.Second, audit.StatePending, audit.StateResolved)
	f.write("thegram", "gram_patch", 0, audit.StateDurable, audit.StateDoubleApplied)
	f.finding("thegram", audit.KindUnverifiedWrite, 10)
	f.finding("thegram", audit.KindDoubleAppliedWrite, 1)
	f.finding("thegram", audit.KindIntegrityFailure, 1)
	f.finding("oddlynew", audit.KindDuplicateCreate, 1)
	f.finding("thegram", audit.KindUnsafeRetry, 1)
	f.finding("thegram", audit.KindWastedRetry, 5)
	f.finding("thegram", audit.KindPrematureRetry, 3)
	f.m.IngestAccepted(metrics.SourceOTLPHTTP, 15)
	f.m.IngestRejected(metrics.SourceOTLPHTTP, metrics.RejectBadSpan, 5)
	f.m.IngestAccepted(metrics.SourceCallsHTTP, 20)
	for i := range 5 {
		f.m.ObserveStoreCommit(time.Duration(i+1) * time.Millisecond)
	}
}

// faultyStore counts the faults of both stores. Of audit.Store, only
// Ready and Watermark are called (metrics.WatchReady).
type faultyStore struct {
	audit.Store
	idIndex, spoolRejected, idCorrupt, tailsCut, filesRejected atomic.Int64
	// spoolBytes is what its log holds, of a limit of 1000 bytes.
	spoolBytes atomic.Int64
	// unready makes Ready fail, as a store in an outage.
	unready atomic.Bool
}

func (s *faultyStore) Ready() error {
	if s.unready.Load() {
		return audit.ErrUnavailable
	}
	return nil
}

func (s *faultyStore) Watermark(context.Context) (time.Time, error) { return time.Time{}, nil }

func (s *faultyStore) SpoolUsage() (int64, int64) { return s.spoolBytes.Load(), 1000 }

func (s *faultyStore) IDIndexFailures() int64    { return s.idIndex.Load() }
func (s *faultyStore) SpoolFilesRejected() int64 { return s.spoolRejected.Load() }
func (s *faultyStore) IDIndexCorruptions() int64 { return s.idCorrupt.Load() }
func (s *faultyStore) SpoolTailsCut() int64      { return s.tailsCut.Load() }
func (s *faultyStore) SpoolFilesSetAside() (int, int, error) {
	return int(s.filesRejected.Load()), 0, nil
}
