package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// delivery is one call record as production delivers it: by which source
// (an exporter of one pod, or a poster), and when relative to the others.
type delivery struct {
	rec    map[string]any
	server string
	// pod names the source within its server: its own exporter, or its
	// own poster.
	pod string
	// poster, if set, names the poster of call records instead: one
	// poster may send several servers (an exporter cannot: its resource
	// is one service).
	poster string
	// at orders the deliveries: a source sends its calls in this order,
	// and the sources are fed in it.
	at time.Time
	// wall, if set, is when (after the replay's start) the call is sent:
	// a replay paced in wall time, where a stalled source's calls wait
	// while the others go on. Zero: at full speed.
	wall time.Duration
	// tooLate, if set, holds the call back, after every call before it
	// has been sent, until its partition's watermark is more than
	// detect.allowed_lateness past its time (holdTooLate): a call later
	// than the allowance however long the rest took to arrive. A fixed
	// wall time cannot say so: the partition takes no watermark before
	// its join wait ends, and its source must have gone idle for the
	// watermark to move that far, both counted from when the rest
	// arrived, which a loaded machine delays by seconds.
	tooLate bool
}

// schedule sorts deliveries by when they are sent: paced ones by wall
// time, each at its place in delivery order.
func schedule(ds []delivery) {
	sort.SliceStable(ds, func(a, b int) bool {
		if ds[a].wall != ds[b].wall {
			return ds[a].wall < ds[b].wall
		}
		return ds[a].at.Before(ds[b].at)
	})
}

// pacer sleeps until each paced delivery is due.
type pacer struct{ start time.Time }

func (p *pacer) wait(d delivery) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	if due := time.Until(p.start.Add(d.wall)); d.wall > 0 && due > 0 {
		time.Sleep(due)
	}
}

// liveClock is the collector's wall clock in TestServe_LiveDelivery: the
// real one, stopped while a replay at full speed is delivered (freeze,
// resume), and moved on by later once the delivery is done.
//
// A replay at full speed stands for sources that deliver at once; what
// the collector does with a source's calls depends on the wall time
// between them (a source quiet for detect.idle_timeout, 3 s here, holds
// its partition back no more, and a new partition takes a watermark
// after its join wait), so on a loaded machine, where such a replay took
// 12-15 s with stalls of seconds, sources went quiet or joined late in
// the middle of it, and their calls were counted too late (flk49: 150 and
// 335 calls too late, 24 and 49 of 119 findings missing, at load 36-40).
// With the clock stopped until every call delivered has reached the
// engine, the stalls of the machine are not stalls of the sources; the
// paced scenarios, whose stalls are the scenario, run on the real clock.
type liveClock struct {
	mu     sync.Mutex
	frozen bool
	at     time.Time     // the time shown while frozen
	shift  time.Duration // how long it was frozen, in all
	offset atomic.Int64  // later, once delivered
}

func (c *liveClock) now() time.Time {
	c.mu.Lock()
	t := time.Now().Add(-c.shift)
	if c.frozen {
		t = c.at
	}
	c.mu.Unlock()
	return t.Add(time.Duration(c.offset.Load()))
}

func (c *liveClock) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen {
		c.frozen, c.at = true, time.Now().Add(-c.shift)
	}
}

// resume starts the clock again from where it stopped, once every call
// acknowledged has been handed to the engine (the engine dates a source's
// delivery when it takes it): none of them is taken after the clock has
// gone on.
func (c *liveClock) resume(t *testing.T, s *server) {
	t.Helper()
	waitStatus(t, s, func(st api.StatusResponse) bool { return st.Queued == 0 })
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen {
		c.frozen, c.shift = false, time.Since(c.at)
	}
}

func recTime(r map[string]any) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, r["time"].(string))
	return t
}

func recEnd(r map[string]any) time.Time {
	ms, _ := r["duration_ms"].(float64)
	return recTime(r).Add(time.Duration(ms * float64(time.Millisecond)))
}

func podOf(r map[string]any, n uint32) string {
	h := fnv.New32a()
	s, _ := r["session"].(string)
	h.Write([]byte(s))
	return fmt.Sprintf("pod-%d", h.Sum32()%n)
}

// liveCapture is a generated mixed capture of both servers dated in the
// recent past (the wall clock matters: skew, quiet), as call records.
func liveCapture(t *testing.T, seed int64) []map[string]any { return liveCaptureOf(t, seed, 300) }

// recentCapture is liveCapture ending at the wall clock: its calls are
// dated within the last 10 minutes, within detect.max_clock_lag (15 m) of
// their delivery, as a live pod's are.
func recentCapture(t *testing.T, seed int64) []map[string]any {
	t.Helper()
	return captureFrom(t, seed, 300, time.Now().Add(-10*time.Minute).Truncate(time.Second))
}

func liveCaptureOf(t *testing.T, seed int64, sessions int) []map[string]any {
	t.Helper()
	return captureFrom(t, seed, sessions, time.Now().Add(-50*time.Minute).Truncate(time.Second))
}

// captureFrom is a generated mixed capture of both servers whose calls
// span the 10 minutes from start, as call records.
func captureFrom(t *testing.T, seed int64, sessions int, start time.Time) []map[string]any {
	t.Helper()
	c := capgen.Generate(capgen.Config{Seed: seed, Sessions: sessions, Start: start, Span: 10 * time.Minute, AnomalyRate: 0.4, NoiseRate: 0.0001})
	var out []map[string]any
	for _, l := range c.Lines {
		var m map[string]any
		if json.Unmarshal(l, &m) != nil || m["time"] == nil || m["server"] == nil || m["request"] == nil {
			continue // the capture's bad lines
		}
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["time"])); err != nil {
			continue
		}
		out = append(out, m)
	}
	return out
}

// liveConfig: windows short enough that a quiet partition closes them in
// seconds of wall time, an idle timeout of three seconds, and an allowance
// for late calls that covers a stall of a paced replay (100 times the
// capture's speed: seconds of wall time are minutes of event time). The
// idle timeout is longer than a loaded 2-core machine stalls a sender: a
// source replaying the past that a stall makes idle lets its partition
// jump to the other sources' time, and its next calls come too late (a
// run with one second, beside other loads, lost 5 findings so).
func liveConfig(t *testing.T) Config {
	cfg := testConfig(t, t.TempDir())
	cfg.Detect.VerifyWindow = 6 * time.Second
	cfg.Detect.IdleTimeout = 3 * time.Second
	cfg.Detect.AllowedLateness = 10 * time.Minute
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// deliverSpans sends the deliveries as MCP server spans through the
// OpenTelemetry Go SDK: one tracer provider per source (a pod of a server:
// service.name and service.instance.id), each with a batch span processor
// (blocking, batches of 256) and its own exporter, at full speed. Spans
// go to their providers in delivery order, each ended at its end time, so
// that each provider exports them in that order, while the providers run
// ahead of and behind each other as they do in production.
// A tooLate delivery waits for hold before its span starts: the spans
// before it are ended and exported meanwhile.
func deliverSpans(t *testing.T, ds []delivery, newExporter func() (sdktrace.SpanExporter, error), hold func(delivery)) {
	t.Helper()
	ctx := context.Background()
	providers := map[string]*sdktrace.TracerProvider{}
	var pace pacer
	for _, d := range ds {
		pace.wait(d)
		if d.tooLate {
			// Every span before it is exported before it waits.
			for _, tp := range providers {
				if err := tp.ForceFlush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			hold(d)
		}
		key := d.server + "/" + d.pod
		tp := providers[key]
		if tp == nil {
			exp, err := newExporter()
			if err != nil {
				t.Fatal(err)
			}
			tp = sdktrace.NewTracerProvider(
				sdktrace.WithBatcher(exp, sdktrace.WithBlocking(), sdktrace.WithMaxExportBatchSize(256), sdktrace.WithBatchTimeout(20*time.Millisecond)),
				sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", d.server), attribute.String("service.instance.id", d.pod))))
			providers[key] = tp
		}
		r := d.rec
		ms := mcpSpanOf(r)
		attrs := make([]attribute.KeyValue, len(ms.attrs))
		for i, kv := range ms.attrs {
			attrs[i] = attribute.String(kv[0], kv[1])
		}
		_, span := tp.Tracer("mcp-server").Start(ctx, ms.name,
			trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(recTime(r)), trace.WithAttributes(attrs...))
		if ms.failed {
			span.SetStatus(codes.Error, ms.message)
		}
		span.End(trace.WithTimestamp(recEnd(r)))
	}
	var wg sync.WaitGroup
	for _, tp := range providers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tp.Shutdown(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// mcpSpan is what an MCP server's span of a tools/call exchange carries,
// following the MCP semantic conventions: its name, its attributes (every
// value a string) and its status.
type mcpSpan struct {
	name    string
	attrs   [][2]string
	failed  bool
	message string
}

// mcpSpanOf is the span an MCP server's exporter sends for call record r;
// deliverSpans (through the SDK) and spansOf (as pdata) send it.
func mcpSpanOf(r map[string]any) mcpSpan {
	req := r["request"].(map[string]any)
	params := req["params"].(map[string]any)
	args, _ := json.Marshal(params["arguments"])
	ms := mcpSpan{name: "tools/call " + params["name"].(string), attrs: [][2]string{
		{"mcp.method.name", "tools/call"},
		{"gen_ai.tool.name", params["name"].(string)},
		{"gen_ai.operation.name", "execute_tool"},
		{"jsonrpc.request.id", fmt.Sprint(req["id"])},
		{"gen_ai.tool.call.arguments", string(args)},
	}}
	if sess, ok := r["session"].(string); ok {
		ms.attrs = append(ms.attrs, [2]string{"mcp.session.id", sess})
	}
	switch {
	case r["transport_error"] != nil:
		te := r["transport_error"].(string)
		ms.attrs = append(ms.attrs, [2]string{"error.type", te})
		ms.failed, ms.message = true, te
	case r["response"] != nil:
		resp := r["response"].(map[string]any)
		if res, ok := resp["result"].(map[string]any); ok {
			b, _ := json.Marshal(res)
			ms.attrs = append(ms.attrs, [2]string{"gen_ai.tool.call.result", string(b)})
			if res["isError"] == true {
				ms.attrs = append(ms.attrs, [2]string{"error.type", "tool_error"})
				ms.failed, ms.message = true, "tool error"
			}
		} else if e, ok := resp["error"].(map[string]any); ok {
			ms.attrs = append(ms.attrs, [2]string{"rpc.response.status_code", fmt.Sprint(e["code"])},
				[2]string{"rpc.jsonrpc.error_message", fmt.Sprint(e["message"])})
			ms.failed, ms.message = true, fmt.Sprint(e["message"])
		}
	}
	return ms
}

// deliverCalls posts the deliveries as call records, each source its own
// poster (Mcpaudit-Source), in batches of up to 100 in delivery order. A
// tooLate delivery waits for hold once every call before it is posted.
func deliverCalls(t *testing.T, s *server, ds []delivery, hold func(delivery)) {
	t.Helper()
	batches := map[string][]map[string]any{}
	flush := func(src string) {
		b := batches[src]
		if len(b) == 0 {
			return
		}
		postAs(t, s.ingestAddr, src, ndjson(b))
		batches[src] = nil
	}
	var pace pacer
	last := time.Duration(0)
	for _, d := range ds {
		src := d.server + "/" + d.pod
		if d.poster != "" {
			src = d.poster
		}
		if d.wall > last || d.tooLate {
			// Paced: what each poster has is sent before time goes on.
			for k := range batches {
				flush(k)
			}
			last = max(last, d.wall)
		}
		pace.wait(d)
		if d.tooLate {
			hold(d)
		}
		batches[src] = append(batches[src], d.rec)
		if len(batches[src]) == 100 {
			flush(src)
		}
	}
	keys := make([]string, 0, len(batches))
	for k := range batches {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		flush(k)
	}
}

// waitJudged waits until the collector has judged everything and every
// verification window has closed on the wall clock, then returns the
// findings of the API.
func waitJudged(t *testing.T, s *server, want []audit.Finding, anyObservation bool) []audit.Finding {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	var got []audit.Finding
	for time.Now().Before(deadline) {
		got = apiFindings(t, s, "")
		if anyObservation {
			got = byExchange(got)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if bytes.Equal(gj, wj) {
			return got
		}
		time.Sleep(250 * time.Millisecond)
	}
	return got
}

// holdTooLate returns a hold for tooLate deliveries: it starts the
// collector's clock again (everything before the call is delivered) and
// waits until the partition of the delivery's server has a watermark more
// than the allowed lateness past the call's time, so that the call is
// counted too late on arrival (the watermark only moves on).
func holdTooLate(t *testing.T, s *server, clock *liveClock, allowed time.Duration) func(delivery) {
	return func(d delivery) {
		t.Helper()
		clock.resume(t, s)
		at, began := recTime(d.rec), time.Now()
		waitStatus(t, s, func(st api.StatusResponse) bool {
			for _, p := range st.Partitions {
				if p.Server == d.server && p.Watermark != nil && p.Watermark.After(at.Add(allowed)) {
					return true
				}
			}
			return false
		})
		t.Logf("the call later than the allowance held %v for its partition's watermark", time.Since(began).Round(time.Millisecond))
	}
}

// waitStatus waits until the collector's status satisfies ok.
func waitStatus(t *testing.T, s *server, ok func(api.StatusResponse) bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var st api.StatusResponse
		getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &st)
		if ok(st) {
			return
		}
	}
	t.Fatal("the status never came to what was waited for")
}

// byExchange returns the findings as what they say, without the
// observations they cite: kind, severity, document, key and how many
// calls, in a stable order (a finding's id, made of these, distinguishes
// findings that say the same of the same document by a counter).
func byExchange(fs []audit.Finding) []audit.Finding {
	out := make([]audit.Finding, 0, len(fs))
	for _, f := range fs {
		out = append(out, audit.Finding{Kind: f.Kind, Severity: f.Severity, Tenant: f.Tenant, Server: f.Server,
			Document: f.Document, Key: f.Key, Session: f.Session, Reason: f.Reason, RetryAction: f.RetryAction, Calls: f.Calls})
	}
	sort.SliceStable(out, func(a, b int) bool {
		x, y := out[a], out[b]
		if x.Document != y.Document {
			return x.Document < y.Document
		}
		if x.Kind != y.Kind {
			return x.Kind < y.Kind
		}
		if x.Key != y.Key {
			return x.Key < y.Key
		}
		return len(x.Calls) < len(y.Calls)
	})
	for i := range out {
		// In place of the calls, their number and the finding's place in
		// this order, so that ids of equal findings still differ.
		out[i].Calls = []string{fmt.Sprintf("%d calls, #%d", len(out[i].Calls), i)}
	}
	return out
}

// diffFindings reports findings missing from got and extra in it.
func diffFindings(t *testing.T, name string, want, got []audit.Finding) {
	t.Helper()
	index := func(fs []audit.Finding) map[string]audit.Finding {
		m := map[string]audit.Finding{}
		for _, f := range fs {
			m[f.ID()] = f
		}
		return m
	}
	w, g := index(want), index(got)
	var missing, extra []string
	for id, f := range w {
		if _, ok := g[id]; !ok {
			missing = append(missing, fmt.Sprintf("%s %s %s %v", f.Kind, f.Document, f.Key, f.Calls))
		}
	}
	var differ []string
	for id, f := range g {
		wf, ok := w[id]
		if !ok {
			extra = append(extra, fmt.Sprintf("%s %s %s %v: %s", f.Kind, f.Document, f.Key, f.Calls, f.Summary))
			continue
		}
		// The same finding says the same, summary included: a call
		// judged late must not lose what judging in order writes of it.
		a, b := wf, f
		a.Status, b.Status = nil, nil // where a store keeps it: a pointer, and not the finding's content
		if wj, gj := fmt.Sprintf("%+v", a), fmt.Sprintf("%+v", b); wj != gj {
			differ = append(differ, fmt.Sprintf("%s %s\n    want %s\n    got  %s", f.Kind, f.Document, wj, gj))
		}
	}
	if len(differ) > 0 {
		sort.Strings(differ)
		t.Errorf("%s: %d findings differ from analyze's:\n  %s", name, len(differ), strings.Join(differ[:min(5, len(differ))], "\n  "))
	}
	if len(missing)+len(extra) > 0 {
		sort.Strings(missing)
		sort.Strings(extra)
		t.Errorf("%s: %d findings expected, %d missing, %d extra\nmissing:\n  %s\nextra:\n  %s", name, len(want), len(missing), len(extra),
			strings.Join(missing[:min(8, len(missing))], "\n  "), strings.Join(extra[:min(8, len(extra))], "\n  "))
	}
}

// liveScenarios are the ways production delivers a capture, each a
// function of the capture's records (in time order) to deliveries.
var liveScenarios = []struct {
	name string
	// deliver turns the capture into deliveries.
	deliver func(recs []map[string]any) []delivery
	// later, if set, is how far the collector's clock is moved on after
	// the delivery, for windows dated ahead of it to close.
	later time.Duration
	// asDelivered: analyze reads the calls in the order they were
	// delivered, not in time order (a call later than the allowance is
	// too late for it as well).
	asDelivered bool
	// anyObservation: every exchange is observed twice, and a finding may
	// cite either observation as its evidence (the one judged first, when
	// the calls came late). Findings are compared by what they say of
	// which document and key, not by the ids of their calls.
	anyObservation bool
	// recent: the capture ends at the collector's clock (recentCapture),
	// not 40 minutes before it, so that its sources with a right clock are
	// current (detect.max_clock_lag), as live pods are. A scenario with a
	// source dated ahead needs it: that source is current, and beside it
	// a source whose calls are all dated more than max_clock_lag back is
	// a slow clock, which holds nothing back once the partition has a
	// watermark (docs/detection.md, Clocks): its calls that come after
	// join_wait and after the pod ahead's first are counted too late (as
	// clock_behind), so analyze's findings came only when the replay took
	// less than join_wait (under a load of 30, 82 to 375 calls too late,
	// 9 to 53 of 127 findings missing).
	recent bool
	// clockLagOff: detect.max_clock_lag is 0, so that a source whose
	// calls are dated hours (or, in a capture 50 minutes old, minutes)
	// behind their delivery holds its partition back as any source behind
	// does (docs/config.md). With the default (15m), such a source beside
	// a current one (a pod ahead) holds nothing back and its calls are
	// counted too late (clock_behind), but only those that come after the
	// partition's join_wait (3 s here), which holds every source of a new
	// partition: how many are judged depends on how fast the replay runs,
	// and analyze's findings came only when it took less than join_wait
	// (flk47: paced over 8 s, 3 of 3 carriers failed, 39 of 119 findings
	// missing, 246-249 calls too late; at full speed under a load of 26-39,
	// 1 run of 6 took 5.0 s: 147 calls too late, 24 findings missing).
	// Dated at the wall clock (recent) the pods two hours behind are
	// still such sources, and within max_clock_lag a quiet slow pod holds
	// its partition after the replay, so the scenario needs the rule off;
	// the rule itself is tested in collector/detect and
	// TestTooLateBehindTellsSlowClockFromBacklog.
	clockLagOff bool
}{
	{"two_providers_at_full_speed", func(recs []map[string]any) []delivery {
		var ds []delivery
		for _, r := range recs {
			ds = append(ds, delivery{rec: r, server: r["server"].(string), pod: "0", at: recTime(r)})
		}
		return ds
	}, 0, false, false, false, false},
	{"timeouts_delivered_at_their_end", func(recs []map[string]any) []delivery {
		var ds []delivery
		for _, r := range recs {
			ds = append(ds, delivery{rec: r, server: r["server"].(string), pod: "0", at: recEnd(r)})
		}
		return ds
	}, 0, false, false, false, false},
	{"one_source_lagging_10m", func(recs []map[string]any) []delivery {
		var ds []delivery
		for _, r := range recs {
			d := delivery{rec: r, server: r["server"].(string), pod: "0", at: recEnd(r)}
			if d.server == "oddlynew" {
				d.at = d.at.Add(10 * time.Minute)
			}
			ds = append(ds, d)
		}
		return ds
	}, 0, false, false, false, false},
	{"one_poster_two_servers_one_behind", func(recs []map[string]any) []delivery {
		// One poster of call records sends both servers, oddlynew's calls
		// 40 s behind thegram's (its queue is behind); as exporters, two
		// resources, the same delays. Each server is held back only by
		// what the poster delivered for it: thegram's calls do not make
		// oddlynew's late.
		// Paced at 100 times the capture's speed, so that the partitions
		// are past their start when the delays show.
		var ds []delivery
		first := recTime(recs[0])
		for _, r := range recs {
			d := delivery{rec: r, server: r["server"].(string), pod: "0", poster: "shipper", at: recEnd(r)}
			if d.server == "oddlynew" {
				d.at = d.at.Add(40 * time.Second)
			}
			d.wall = d.at.Sub(first) / 100
			ds = append(ds, d)
		}
		return ds
	}, 0, false, false, false, false},
	{"pods_exporting_separately", func(recs []map[string]any) []delivery {
		var ds []delivery
		for _, r := range recs {
			pod := podOf(r, 3)
			lag := map[string]time.Duration{"pod-0": 0, "pod-1": 2 * time.Second, "pod-2": 5 * time.Second}[pod]
			ds = append(ds, delivery{rec: r, server: r["server"].(string), pod: pod, at: recEnd(r).Add(lag)})
		}
		return ds
	}, 0, false, false, false, false},
	{"source_clock_an_hour_ahead", func(recs []map[string]any) []delivery {
		// One pod of each server runs an hour ahead: its calls are dated
		// an hour later (ahead of the collector's clock), and delivered
		// after the other pod's. The other pod's clock is right: its
		// calls end at the collector's clock (recent).
		var ds []delivery
		for _, r := range recs {
			pod := podOf(r, 2)
			if pod == "pod-1" {
				r = shifted(r, time.Hour)
			}
			ds = append(ds, delivery{rec: r, server: r["server"].(string), pod: pod, at: recEnd(r)})
		}
		return ds
	}, 70 * time.Minute, false, false, true, false},
	{"clocks_ahead_and_behind_one_exporter_lagging", func(recs []map[string]any) []delivery {
		// Every pod exports at the real time its calls end (the existing
		// skew scenario delivers the pod ahead after the others), while
		// its clock dates them: thegram's pod-1 an hour ahead, pod-2 two
		// hours behind, pod-3 right but exporting 10 min late; oddlynew's
		// pod-1 two hours behind, pod-2 exporting 40 s late. The pods
		// behind hold their partitions back (they deliver from the start,
		// so they are not further behind than the allowance, with
		// max_clock_lag off: clockLagOff), the calls ahead are judged on
		// arrival, and the rest are judged late against them: analyze's
		// findings on the same calls in time order.
		skew := map[string]time.Duration{"thegram/pod-1": time.Hour, "thegram/pod-2": -2 * time.Hour, "oddlynew/pod-1": -2 * time.Hour}
		lag := map[string]time.Duration{"thegram/pod-3": 10 * time.Minute, "oddlynew/pod-2": 40 * time.Second}
		var ds []delivery
		for _, r := range recs {
			server, pod := r["server"].(string), podOf(r, 4)
			at := recEnd(r).Add(lag[server+"/"+pod])
			if d := skew[server+"/"+pod]; d != 0 {
				r = shifted(r, d)
			}
			ds = append(ds, delivery{rec: r, server: server, pod: pod, at: at})
		}
		return ds
	}, 70 * time.Minute, false, false, false, true},
	{"call_later_than_the_allowance", func(recs []map[string]any) []delivery {
		// One timed-out write, early in the capture, is delivered after
		// everything else, once the watermark of its partition is more
		// than the allowed lateness past it (tooLate: after the
		// partition's join wait, with its source quiet for longer than
		// the idle timeout). It is stored and counted, not judged.
		var ds []delivery
		late := -1
		for i, r := range recs {
			if late < 0 && i > 10 && r["transport_error"] != nil && r["server"] == "thegram" {
				late = i
			}
		}
		for i, r := range recs {
			d := delivery{rec: r, server: r["server"].(string), pod: "0", at: recTime(r)}
			if i == late {
				d.at = recTime(recs[len(recs)-1]).Add(time.Second)
				d.tooLate = true
			}
			ds = append(ds, d)
		}
		return ds
	}, 0, true, false, false, false},
	{"source_idle_then_resuming", func(recs []map[string]any) []delivery {
		// Paced at 100 times the speed of the capture: one pod of thegram
		// stalls for 6 s of wall time a third of the way in (longer than
		// the idle timeout: the partition goes on with the other pod),
		// then sends its backlog.
		var ds []delivery
		first := recTime(recs[0])
		stall := recTime(recs[len(recs)/3]).Sub(first) / 100
		resume := stall + 6*time.Second
		for _, r := range recs {
			pod := podOf(r, 2)
			d := delivery{rec: r, server: r["server"].(string), pod: pod, at: recEnd(r)}
			d.wall = recEnd(r).Sub(first) / 100
			if d.server == "thegram" && pod == "pod-1" && d.wall >= stall && d.wall < resume {
				d.wall = resume
			}
			ds = append(ds, d)
		}
		return ds
	}, 0, false, false, false, false},
	{"two_observers_one_stalling", func(recs []map[string]any) []delivery {
		// Every exchange is observed twice: by the server's exporter and
		// by a client-side observer whose clock reads 300 ms later (so
		// its records have other ids). Paced at 100 times the speed of
		// the capture, the client-side observer stalls for 2.5 s a third
		// of the way in, then sends its backlog: second observations of
		// calls judged long before, which must stay duplicates.
		var ds []delivery
		first := recTime(recs[0])
		stall := recTime(recs[len(recs)/3]).Sub(first) / 100
		resume := stall + 2500*time.Millisecond
		for _, r := range recs {
			server := r["server"].(string)
			wall := recEnd(r).Sub(first) / 100
			ds = append(ds, delivery{rec: r, server: server, pod: "server", at: recEnd(r), wall: wall})
			c := shifted(r, 300*time.Millisecond)
			d := delivery{rec: c, server: server, pod: "client", at: recEnd(c), wall: wall + 3*time.Millisecond}
			if d.wall >= stall && d.wall < resume {
				d.wall = resume
			}
			ds = append(ds, d)
		}
		return ds
	}, 0, false, true, false, false},
}

// shifted returns a copy of r dated d later, with its id-bearing fields
// unchanged otherwise.
func shifted(r map[string]any, d time.Duration) map[string]any {
	c := map[string]any{}
	for k, v := range r {
		c[k] = v
	}
	c["time"] = recTime(r).Add(d).Format(time.RFC3339Nano)
	return c
}

// TestServe_LiveDelivery: each way production delivers traffic (see
// liveScenarios), over OTLP/gRPC and OTLP/HTTP from the OpenTelemetry Go
// SDK and over /v1/calls, gives the findings analyze gives on the same
// calls.
func TestServe_LiveDelivery(t *testing.T) {
	for i, sc := range liveScenarios {
		for _, carrier := range []string{"grpc", "http", "calls"} {
			t.Run(sc.name+"/"+carrier, func(t *testing.T) {
				t.Parallel()
				cfg := liveConfig(t)
				if sc.clockLagOff {
					cfg.Detect.MaxClockLag = 0
				}
				// The collector's clock: the real one, stopped while a
				// replay at full speed is delivered (liveClock), moved on
				// by later once the delivery is done. The calls dated
				// ahead of it are a fault of the sources' clocks; that the
				// collector's moves on cannot be shown otherwise within a
				// test.
				clock := &liveClock{}
				cfg.Serve.Pipeline.Now = clock.now
				recs := liveCapture(t, int64(20+i))
				if sc.recent {
					recs = recentCapture(t, int64(20+i))
				}
				ds := sc.deliver(recs)
				schedule(ds)
				var same []map[string]any
				for _, d := range ds {
					same = append(same, d.rec)
				}
				if !sc.asDelivered {
					sort.SliceStable(same, func(a, b int) bool { return recTime(same[a]).Before(recTime(same[b])) })
				}
				want := analyzeFindings(t, cfg, ndjson(same))
				if len(want) < 20 {
					t.Fatalf("the capture gives %d findings: too few to tell", len(want))
				}
				s := startTest(t, cfg)
				hold := holdTooLate(t, s, clock, cfg.Detect.AllowedLateness)
				fullSpeed := !slices.ContainsFunc(ds, func(d delivery) bool { return d.wall > 0 })
				if fullSpeed {
					clock.freeze()
				}
				began := time.Now()
				switch carrier {
				case "grpc":
					deliverSpans(t, ds, func() (sdktrace.SpanExporter, error) {
						return otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(s.grpcAddr), otlptracegrpc.WithInsecure())
					}, hold)
				case "http":
					deliverSpans(t, ds, func() (sdktrace.SpanExporter, error) {
						return otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(s.ingestAddr), otlptracehttp.WithInsecure())
					}, hold)
				default:
					deliverCalls(t, s, ds, hold)
				}
				delivered := time.Since(began)
				clock.resume(t, s)
				if sc.later > 0 {
					waitStatus(t, s, func(st api.StatusResponse) bool { return st.Judged })
					clock.offset.Store(int64(sc.later))
				}
				if sc.anyObservation {
					want = byExchange(want)
				}
				got := waitJudged(t, s, want, sc.anyObservation)
				diffFindings(t, sc.name, want, got)
				var st api.StatusResponse
				getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &st)
				late, tooLate, ahead := int64(0), int64(0), int64(0)
				for _, p := range st.Partitions {
					late += p.Late
					tooLate += p.TooLate
					ahead += p.Ahead
				}
				if sc.asDelivered && tooLate != 1 {
					t.Errorf("%d calls too late, want 1", tooLate)
				}
				t.Logf("%d findings, %d calls judged late, %d too late, %d ahead of the clock, judged: %v; delivered in %v", len(got), late, tooLate, ahead, st.Judged, delivered)
				if t.Failed() {
					b, _ := json.MarshalIndent(st.Partitions, "", " ")
					t.Logf("status: %s", b)
				}
			})
		}
	}
}
