package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestServe_MaxSources: one-call requests each under its own
// Mcpaudit-Source, more than detect.max_sources at once. The partition
// lists at most max_sources sources and its overflow source, every call is
// acknowledged and judged, the overflow is counted in the status and the
// metrics (with no source name as a label), and the state file keeps at
// most max_sources sources. Before, every source was kept for an hour:
// 30,000 of them made the status 10 MB and a one-call request twice as
// slow (docs/security.md).
func TestServe_MaxSources(t *testing.T) {
	const max, posters = 4, 40
	cfg := testConfig(t, t.TempDir())
	cfg.Detect.MaxSources = max
	// Every poster stays active while the others post.
	cfg.Detect.IdleTimeout = 10 * time.Second
	cfg.Detect.JoinWait = time.Second
	var logs lockedBuffer
	s := startLogging(t, cfg, &logs)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stopServer(t, s)
		}
	})
	t0 := time.Now().UTC()
	for i := range posters {
		line := fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d/%d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/%d.gram","rev":4,"hash":"bb"}}}}`,
			t0.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i, i, i, i, i)
		postAs(t, s.ingestAddr, fmt.Sprintf("poster-%d", i), []byte(line+"\n"))
	}
	var st api.StatusResponse
	waitStatus(t, s, func(r api.StatusResponse) bool {
		st = r
		return len(r.Partitions) == 1 && r.Partitions[0].Calls == posters && r.Partitions[0].Buffered == 0
	})
	p := st.Partitions[0]
	kept, overflowed := 0, 0
	for _, src := range p.Sources {
		if src.Overflow {
			overflowed++
		} else {
			kept++
		}
	}
	if kept != max || overflowed != 1 {
		t.Errorf("the status lists %d sources and %d overflow sources; want max_sources, %d, and 1", kept, overflowed, max)
	}
	if p.OverflowCalls != posters-max {
		t.Errorf("overflow_calls %d; want the calls of the %d posters past max_sources", p.OverflowCalls, posters-max)
	}
	resp, err := http.Get("http://" + s.apiAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	mf := mfs[metrics.PipelineSourceOverflowCallsTotal]
	if mf == nil || len(mf.Metric) != 1 {
		t.Fatalf("%s: %v; want one series", metrics.PipelineSourceOverflowCallsTotal, mf)
	}
	m := mf.Metric[0]
	if len(m.Label) != 1 || m.Label[0].GetName() != "server" || m.Label[0].GetValue() != "thegram" {
		t.Errorf("%s labels %v; want server=thegram alone", metrics.PipelineSourceOverflowCallsTotal, m.Label)
	}
	if got := m.GetCounter().GetValue(); got != float64(posters-max) {
		t.Errorf("%s = %v; want %d", metrics.PipelineSourceOverflowCallsTotal, got, posters-max)
	}
	if l := logs.String(); !strings.Contains(l, "kind=source_overflow") || !strings.Contains(l, "server=thegram") || strings.Contains(l, "poster-") {
		t.Errorf("want a source_overflow warning naming the partition, and no source:\n%s", l)
	}
	stopServer(t, s)
	stopped = true
	b, err := os.ReadFile(filepath.Join(cfg.Serve.DataDir, "partitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Partitions []struct {
			Sources []struct{ Name string } `json:"sources"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	for _, p := range file.Partitions {
		if len(p.Sources) > max {
			t.Errorf("the state file keeps %d sources of a partition; want at most max_sources, %d", len(p.Sources), max)
		}
	}
}
