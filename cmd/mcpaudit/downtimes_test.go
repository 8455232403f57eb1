package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestServe_DowntimesKept stops a real serve cleanly (SIGTERM), then kills
// it (SIGKILL), restarting it on the same data directory each time: the
// status lists both downtimes with how each run ended, `mcpaudit status`
// says so, and the timeline of a document, on the API and the page, marks
// them where the time it shows overlaps them, and not otherwise (op17: an
// earlier outage was told nowhere, and a document's timeline of that time
// looked as if nothing happened).
func TestServe_DowntimesKept(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	if err := os.WriteFile(config, []byte("serve:\n  pipeline:\n    commit_every: 50ms\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ingest, apiAddr := freePort(t), freePort(t)
	start := func() *child { return startChild(t, dir, config, ingest, apiAddr) }
	// running waits for a save of the state file made by this run.
	running := func() {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			b, err := os.ReadFile(filepath.Join(dir, "partitions.json"))
			if err == nil && strings.Contains(string(b), `"run":"running"`) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the state file does not say the run is running: %s", b)
			}
		}
	}
	c := start()
	defer func() { c.kill() }()
	running()
	const doc = "ops/down17.gram"
	at := time.Now().UTC().Add(-time.Minute)
	line := fmt.Sprintf(`{"duration_ms":10,"request":{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":%q}}},"response":{"id":1,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":%q,"rev":3}}},"server":"thegram","session":"s-down17","time":%q}`+"\n",
		doc, doc, at.Format(time.RFC3339Nano))
	resp, err := http.Post("http://"+ingest+"/v1/calls", "application/x-ndjson", strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/calls: %s", resp.Status)
	}

	// A clean stop, down about a second.
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.cmd.Wait()
	stopped := time.Now()
	time.Sleep(time.Second)
	c = start()
	running()
	// A crash: the last save is at most 10 s before it.
	time.Sleep(200 * time.Millisecond)
	c.kill()
	killed := time.Now()
	time.Sleep(time.Second)
	c = start()

	var st api.StatusResponse
	getJSON(t, "http://"+apiAddr+"/api/v1/status", &st)
	if len(st.Downtimes) != 2 {
		t.Fatalf("status downtimes %+v, want 2", st.Downtimes)
	}
	first, second := st.Downtimes[0], st.Downtimes[1]
	if first.End != audit.EndStop || first.From.After(stopped) || stopped.Sub(first.From) > 2*time.Second || first.To.Before(stopped.Add(time.Second)) {
		t.Errorf("first downtime %+v, want a stop from about %v", first, stopped)
	}
	if second.End != audit.EndCrash || second.From.After(killed) || killed.Sub(second.From) > 11*time.Second || second.To.Before(killed.Add(time.Second)) {
		t.Errorf("second downtime %+v, want a crash from at most 10 s before %v", second, killed)
	}
	if st.LastDowntime == nil || st.LastDowntime.End != audit.EndCrash {
		t.Errorf("last downtime %+v, want the crash", st.LastDowntime)
	}
	// Prometheus sees the crash: the downtime before this start, and the
	// restart after each kind of end (crash18).
	unix := func(at time.Time) float64 { return float64(at.UnixNano()) / 1e9 }
	last, restart := scrapeDowntimes(t, apiAddr)
	if want := map[string]float64{audit.EndCrash: second.Seconds}; !maps.Equal(last, want) {
		t.Errorf("%s %v, want %v", metrics.ServeLastDowntimeSeconds, last, want)
	}
	if want := map[string]float64{audit.EndStop: unix(first.To), audit.EndCrash: unix(second.To)}; !maps.Equal(restart, want) {
		t.Errorf("%s %v, want %v", metrics.ServeRestartTimestampSeconds, restart, want)
	}

	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"status", "--api-url", "http://" + apiAddr}, nil, &out, &errb); code != 0 {
		t.Fatalf("status: exit %d: %s", code, errb.String())
	}
	if want := "Downtimes: serve was down 2 times in the history it keeps (the last 100; 1 after a crash)"; !strings.Contains(out.String(), want) {
		t.Errorf("mcpaudit status lacks %q:\n%s", want, out.String())
	}

	// The document's timeline: both downtimes came after its call.
	timeline := func(query string) api.Timeline {
		t.Helper()
		var tl api.Timeline
		getJSON(t, "http://"+apiAddr+"/api/v1/documents/"+url.PathEscape(doc)+"/timeline"+query, &tl)
		return tl
	}
	tl := timeline("")
	if len(tl.Events) == 0 || len(tl.Downtimes) != 2 || tl.Downtimes[1].End != audit.EndCrash || !strings.Contains(tl.Downtimes[1].Note, "(crash): calls sent then by exporters that do not retry may be missing") {
		t.Errorf("timeline %+v, want the call and both downtimes", tl)
	}
	if tl := timeline("?until=" + url.QueryEscape(at.Add(time.Second).Format(time.RFC3339Nano))); len(tl.Downtimes) != 0 {
		t.Errorf("timeline up to its call: downtimes %+v, want none", tl.Downtimes)
	}
	if tl := timeline("?since=" + url.QueryEscape(first.To.Add(time.Millisecond).Format(time.RFC3339Nano))); len(tl.Downtimes) != 1 || tl.Downtimes[0].End != audit.EndCrash {
		t.Errorf("timeline from the second start on: downtimes %+v, want the crash", tl.Downtimes)
	}
	out.Reset()
	if code := run(context.Background(), []string{"timeline", "--api-url", "http://" + apiAddr, doc}, nil, &out, &errb); code != 0 {
		t.Fatalf("timeline: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[2], "call") || !strings.Contains(lines[3], "down") || !strings.Contains(lines[4], "(crash): calls sent then") {
		t.Errorf("mcpaudit timeline: want its call, then a line for each downtime:\n%s", out.String())
	}
	resp, err = http.Get("http://" + apiAddr + "/documents/" + url.PathEscape(doc))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := strings.Count(string(page), `<tr class="downtime"`); n != 2 {
		t.Errorf("the document's page shows %d downtime markers, want 2:\n%s", n, page)
	}

	// Stopped cleanly again: the next start keeps all three.
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.cmd.Wait()
	c = start()
	getJSON(t, "http://"+apiAddr+"/api/v1/status", &st)
	if len(st.Downtimes) != 3 || st.Downtimes[2].End != audit.EndStop {
		b, _ := json.Marshal(st.Downtimes)
		t.Fatalf("after a third restart: downtimes %s, want three, the last a stop", b)
	}
	// A clean restart after the crash: the crash is still told.
	third := st.Downtimes[2]
	last, restart = scrapeDowntimes(t, apiAddr)
	if want := map[string]float64{audit.EndStop: third.Seconds}; !maps.Equal(last, want) {
		t.Errorf("after a clean restart: %s %v, want %v", metrics.ServeLastDowntimeSeconds, last, want)
	}
	if want := map[string]float64{audit.EndStop: unix(third.To), audit.EndCrash: unix(second.To)}; !maps.Equal(restart, want) {
		t.Errorf("after a clean restart: %s %v, want %v", metrics.ServeRestartTimestampSeconds, restart, want)
	}

	// Read with serve stopped, the data dir gives the same timeline, its
	// downtimes marked alike: they are read from the state file beside the
	// store (crash18: the timeline of --data-dir marked none).
	out.Reset()
	if code := run(context.Background(), []string{"timeline", "--api-url", "http://" + apiAddr, doc}, nil, &out, &errb); code != 0 {
		t.Fatalf("timeline: exit %d: %s", code, errb.String())
	}
	online := out.String()
	c.cmd.Process.Signal(syscall.SIGTERM)
	c.cmd.Wait()
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"timeline", "--data-dir", dir, doc}, nil, &out, &errb); code != 0 {
		t.Fatalf("timeline --data-dir: exit %d: %s", code, errb.String())
	}
	if n := strings.Count(online, "  down  "); n != 3 {
		t.Errorf("mcpaudit timeline --api-url: %d down lines, want 3:\n%s", n, online)
	}
	if out.String() != online {
		t.Errorf("mcpaudit timeline --data-dir differs from --api-url:\n%s\nwant\n%s", out.String(), online)
	}
	if errb.Len() > 0 {
		t.Errorf("mcpaudit timeline --data-dir: stderr %q", errb.String())
	}
}

// scrapeDowntimes returns the downtime series of serve's /metrics at
// addr, each by its end label.
func scrapeDowntimes(t *testing.T, addr string) (last, restart map[string]float64) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	byEnd := func(name string) map[string]float64 {
		out := map[string]float64{}
		for _, m := range mfs[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelEnd {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		return out
	}
	return byEnd(metrics.ServeLastDowntimeSeconds), byEnd(metrics.ServeRestartTimestampSeconds)
}
