package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
)

// benchTool is what the state file keeps of one tool whose every outcome,
// both uncertain failures, every terminal state and every move was counted
// (as BenchmarkSaveCountsCalls in exporter/metrics counts them).
const benchTool = `{"calls":{"no_response":2,"ok":2,"protocol_error":2,"tool_error":2},` +
	`"failures":{"COMMIT_UNKNOWN/replay_same_request":1,"in_flight_unknown/verify_then_decide":1},` +
	`"writes":{"double_applied":8,"durable":4,"rejected":2,"resolved":4,"unverified":2},` +
	`"rejudged":{"durable/double_applied":2,"resolved/double_applied":2,"unverified/double_applied":2,"unverified/durable":2,"unverified/resolved":2}}`

// benchFindings is what it keeps of a server's findings, every kind
// counted and withdrawn once.
const benchFindings = `{"double_applied_write/critical":1,"duplicate_create/critical":1,"integrity_failure/critical":1,"premature_retry/info":1,` +
	`"request_id_reuse/warning":1,"unsafe_retry/warning":1,"unverified_write/warning":1,"wasted_retry/info":1}`

// benchServer names the i-th of the 101 server labels of BenchmarkSaveState
// (the default max_servers, 100, and "other").
func benchServer(i int) string {
	if i == 100 {
		return metrics.Other
	}
	return fmt.Sprintf("server-%03d", i)
}

// benchCounters returns metrics counters begun (RestoreCounts) at the
// values of 101 server labels with tools tools each, as serve's are at a
// start from such a state file.
func benchCounters(b *testing.B, tools int) *metrics.Metrics {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Options{KnownCode: func(string) bool { return true }})
	if err != nil {
		b.Fatal(err)
	}
	m.GateOnSave()
	var doc strings.Builder
	doc.WriteString(`{"servers":[`)
	for i := range 101 {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `{"server":%q,"findings":%s,"withdrawn":%s,"tools":{`, benchServer(i), benchFindings, benchFindings)
		for j := range tools {
			if j > 0 {
				doc.WriteByte(',')
			}
			fmt.Fprintf(&doc, `"tool_%02d":%s`, j, benchTool)
		}
		doc.WriteString(`}}`)
	}
	doc.WriteString(`]}`)
	if err := m.RestoreCounts([]byte(doc.String())); err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkSaveState measures the whole save of the state file with the
// counters that go on across restarts (cnt50): what the engine goroutine
// does once a second while counts wait (saveMarks after a commit), from
// the counts to the file written, synced and renamed on the test's disk
// (b.TempDir), with 101 server labels (the default max_servers and
// "other") whose partitions' marks all move, each with tools tools. Before
// each save, one call of each changed tool is counted: one tool of one
// server (few), one tool of each server (servers), or every tool of every
// server (all). cpu-ms/op is the process's CPU time per save (getrusage,
// the GC's included), wchar-B/op the bytes written per save
// (/proc/self/io), file-B the state file's size at the end.
//
//	go test -run '^$' -bench BenchmarkSaveState -benchtime 200x ./collector/pipeline/
func BenchmarkSaveState(b *testing.B) {
	for _, tools := range []int{8, 64} {
		for _, changed := range []string{"few", "servers", "all"} {
			b.Run(fmt.Sprintf("tools=%d/changed=%s", tools, changed), func(b *testing.B) {
				m := benchCounters(b, tools)
				path := filepath.Join(b.TempDir(), "partitions.json")
				t := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
				p := &Pipeline{cfg: Config{StateFile: path, Counters: m}, now: func() time.Time { return t }, queued: map[int64]int{}, freed: map[detect.PartitionKey]freedMark{}}
				marks := func() map[detect.PartitionKey]mark {
					ms := make(map[detect.PartitionKey]mark, 101)
					for i := range 101 {
						ms[detect.PartitionKey{Server: benchServer(i)}] = mark{Watermark: t.Add(-2 * time.Second), At: t}
					}
					return ms
				}
				p.saveMarks(marks(), true)
				servers, toolsChanged := 101, tools
				switch changed {
				case "few":
					servers, toolsChanged = 1, 1
				case "servers":
					toolsChanged = 1
				}
				var cpu time.Duration
				w0 := procstat.Written()
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					for i := range servers {
						for j := range toolsChanged {
							m.Call(&audit.Record{Call: &audit.Call{Server: benchServer(i)}, Tool: fmt.Sprintf("tool_%02d", j), Outcome: audit.OutcomeOK})
						}
					}
					t = t.Add(time.Second)
					next := marks()
					b.StartTimer()
					cpu0 := procstat.CPU()
					p.saveMarks(next, false)
					cpu += procstat.CPU() - cpu0
				}
				b.StopTimer()
				b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
				b.ReportMetric(float64(procstat.Written()-w0)/float64(b.N), "wchar-B/op")
				fi, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(fi.Size()), "file-B")
			})
		}
	}
}
