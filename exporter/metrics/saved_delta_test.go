package metrics

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestSaveCounts_Deltas (cnt50): the values saved as a full SaveCounts
// and the deltas after it (SaveCounts without full), applied in order by
// RestoreCounts, begin the counters where the last full save would: the
// same values, held or shown, through counts on new and known servers and
// tools, findings, withdrawals, and the release of held groups (a
// scrape). A delta holds only what changed: nil with nothing counted,
// one tool of one server for a call.
func TestSaveCounts_Deltas(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{FirstScrapeWait: time.Minute, KnownCode: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	m.GateOnSave()
	at := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	call := func(server, tool string, o audit.Outcome) {
		m.Call(&audit.Record{Call: &audit.Call{Server: server}, Tool: tool, Outcome: o})
	}
	write := func(server, tool string, prev, st audit.WriteState) {
		m.Write(&audit.Write{Server: server, Tool: tool, Time: at, StateTime: at, State: st}, prev)
	}
	finding := func(server string, k audit.Kind, withdraw bool) {
		f := &audit.Finding{Kind: k, Server: server, Time: at}
		m.Finding(f)
		if withdraw {
			m.WithdrawFinding(f, "c", at)
		}
	}
	call("thegram", "gram_patch", audit.OutcomeOK)
	finding("thegram", audit.KindWastedRetry, false)
	full, publish := m.SaveCounts(true)
	publish()
	saved := []json.RawMessage{full}
	steps := []func(){
		func() { call("thegram", "gram_patch", audit.OutcomeOK) },
		func() { call("thegram", "gram_read", audit.OutcomeNoResponse) },
		func() { write("thegram", "gram_patch", "", audit.StateUnverified) },
		func() {
			if _, err := m.Scraper(reg).Gather(); err != nil { // releases the held groups
				t.Fatal(err)
			}
		},
		func() { write("thegram", "gram_patch", audit.StateUnverified, audit.StateDurable) },
		func() { finding("thegram", audit.KindUnsafeRetry, true) },
		func() {
			call("oddlynew", "odd_write", audit.OutcomeToolError)
			finding("oddlynew", audit.KindDoubleAppliedWrite, false)
		},
		func() {},
		func() {
			if _, err := m.Scraper(reg).Gather(); err != nil {
				t.Fatal(err)
			}
			call("thegram", "gram_create", audit.OutcomeOK)
		},
		func() {
			for i := range 5 {
				call(fmt.Sprint("s", i), "t", audit.OutcomeOK)
			}
		},
	}
	for i, step := range steps {
		step()
		d, publish := m.SaveCounts(false)
		publish()
		if i == 7 && d != nil {
			t.Errorf("step %d, nothing counted: delta %s, want nil", i, d)
		}
		if i == 0 {
			want := `{"servers":[{"server":"thegram","same_findings":true,"tools":{"gram_patch":{"calls_held":true,"calls":{"ok":2}}}}]}`
			if string(d) != want {
				t.Errorf("one call: delta\n%s\nwant\n%s", d, want)
			}
		}
		if d != nil {
			saved = append(saved, d)
		}
	}
	want, publish := m.SaveCounts(true)
	publish()
	if !strings.Contains(string(want), `"gram_read":{"calls":{"no_response":1}}`) || !strings.Contains(string(want), `"oddlynew"`) {
		t.Fatalf("the last full save misses counts: %s", want)
	}
	for _, tc := range []struct {
		name  string
		saved []json.RawMessage
	}{{"the first full save and the deltas", saved}, {"the last full save", []json.RawMessage{want}}} {
		t.Run(tc.name, func(t *testing.T) {
			m2, err := New(prometheus.NewRegistry(), Options{FirstScrapeWait: time.Minute, KnownCode: func(string) bool { return true }})
			if err != nil {
				t.Fatal(err)
			}
			m2.GateOnSave()
			if err := m2.RestoreCounts(tc.saved...); err != nil {
				t.Fatal(err)
			}
			got, _ := m2.SaveCounts(true)
			if string(got) != string(want) {
				t.Errorf("restored, saved again:\n%s\nwant\n%s", got, want)
			}
		})
	}
	// Without the last delta, the values before it.
	m3, err := New(prometheus.NewRegistry(), Options{FirstScrapeWait: time.Minute, KnownCode: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if err := m3.RestoreCounts(saved[:len(saved)-1]...); err != nil {
		t.Fatal(err)
	}
	if got, _ := m3.SaveCounts(true); strings.Contains(string(got), `"server":"s4"`) || !strings.Contains(string(got), `"gram_create"`) {
		t.Errorf("restored without the last delta: %s", got)
	}
}

// TestAppendTool: what a save writes of a tool, and of a label, is what
// encoding/json writes, whatever the label holds (any valid UTF-8: a
// control character, a quote) and however large the value.
func TestAppendTool(t *testing.T) {
	f := func(name string, st savedTool) {
		t.Helper()
		want, err := json.Marshal(map[string]savedTool{name: st})
		if err != nil {
			t.Fatal(err)
		}
		got := append(appendTool(append(append([]byte("{"), appendJSONString(nil, name)...), ':'), &st), '}')
		if string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
	f("gram_patch", savedTool{})
	f("gram_patch", savedTool{CallsHeld: true, Calls: map[string]float64{"ok": 3, "tool_error": 1}})
	f("t\x01\"<&>é\\", savedTool{WritesHeld: true, Writes: map[string]float64{"durable": 1e21, "unverified": 123456789012}, Rejudged: map[string]float64{"a/b": 0.5}})
	f("x", savedTool{Failures: map[string]float64{"E\x02/retry": 2}, Calls: map[string]float64{"ok": 1e-7}})
}

// TestSaveCounts_HeldWithoutFindings: a server whose findings series no
// scrape has shown yet is saved held even when only its tools have
// counts, as rcn49 saved it, so that a start holds its findings series
// again (cnt50's first version left the flag out without a finding).
func TestSaveCounts_HeldWithoutFindings(t *testing.T) {
	m, err := New(prometheus.NewRegistry(), Options{FirstScrapeWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.GateOnSave()
	m.Call(&audit.Record{Call: &audit.Call{Server: "thegram"}, Tool: "gram_read", Outcome: audit.OutcomeOK})
	for _, full := range []bool{false, true} {
		b, publish := m.SaveCounts(full)
		publish()
		if !strings.Contains(string(b), `{"server":"thegram","held":true,"tools":{"gram_read":`) {
			t.Errorf("saved (full %v) %s, want thegram held with its tool", full, b)
		}
	}
}
