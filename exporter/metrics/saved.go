package metrics

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mcpaudit/mcpaudit/audit"
)

// The counters the rules divide go on across restarts of serve: the
// findings (FindingsTotal, FindingsWithdrawnTotal; alrt48), and the calls,
// failures and write states (ToolCallsTotal, CallFailuresTotal,
// WritesTotal, WritesRejudgedTotal; rcn49) that McpAuditWastedRetries,
// McpAuditUncertainOutcomes and the SLI's rules divide by. Their values are
// saved in the state file with the partitions' marks (collector/pipeline)
// and a start begins each series at its saved value; the replay at start
// counts again only what was judged after a partition's saved mark
// (SkipCounts, RecountFinding). So that Prometheus never sees one go down
// after a crash (it would read a reset, and increase() would count the
// whole value again), a count is shown only once a save of the state file
// holds it: what a scrape sees is at most what the next start begins at
// (docs/metrics.md, "Counters across restarts").

// savedCounts is what the state file keeps of the counters.
type savedCounts struct {
	Servers []savedServer `json:"servers"`
}

// savedServer is one server label's series, each with its value: every
// count made on it, shown or not; series at zero are left out, and a
// server with none. Held is set while its first findings counts wait for
// the scrapers (Options.FirstScrapeWait): no scrape showed them, and a
// start holds them again behind the series at zero. Findings and
// Withdrawn are by "kind/severity"; Tools by tool label (a release before
// rcn49 saved none).
type savedServer struct {
	Server    string                `json:"server"`
	Held      bool                  `json:"held,omitempty"`
	Findings  map[string]float64    `json:"findings,omitempty"`
	Withdrawn map[string]float64    `json:"withdrawn,omitempty"`
	Tools     map[string]*savedTool `json:"tools,omitempty"`
}

// savedTool is one tool label's call and write series of a server:
// Calls by outcome, Failures by "code/retry_action", Writes by state,
// Rejudged by "from/to". CallsHeld and WritesHeld are set while the
// tool's first call (and failure) or write counts wait for the scrapers,
// as Held is for the findings.
type savedTool struct {
	CallsHeld  bool               `json:"calls_held,omitempty"`
	WritesHeld bool               `json:"writes_held,omitempty"`
	Calls      map[string]float64 `json:"calls,omitempty"`
	Failures   map[string]float64 `json:"failures,omitempty"`
	Writes     map[string]float64 `json:"writes,omitempty"`
	Rejudged   map[string]float64 `json:"rejudged,omitempty"`
}

// GateOnSave has the counts that go on across restarts shown only once
// SaveCounts saved them (its publish function ran): from then on a count
// waits for the next save of the state file. Call it before the first
// count; serve's pipeline does, when it keeps a state file.
func (m *Metrics) GateOnSave() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gated = true
	if m.unsaved == nil {
		m.unsaved = map[prometheus.Counter]float64{}
	}
}

// SkipCounts, while set, has Call and Write count nothing in the counters
// that go on across restarts (the latencies and the pending gauge go on):
// the replay at start judges again calls whose counts the values
// RestoreCounts began at hold, those judged at or before their
// partition's saved mark. The pipeline sets it around telling the sinks
// of such a call or write, from the engine goroutine.
func (m *Metrics) SkipCounts(skip bool) {
	m.mu.Lock()
	m.skip = skip
	m.mu.Unlock()
}

// CountsPending reports whether counts were made (or released by the
// scrapers) since the last SaveCounts: the state file must be saved for
// them to be shown.
func (m *Metrics) CountsPending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.unsaved) > 0
}

// SaveCounts returns the counters' values to save in the state file
// (every count made, shown, held or waiting for this save), and the
// function that shows the counts waiting, to call once the file is
// written. Counts made after it wait for the next save. A server none of
// whose counts changed since the last save is not computed again: its
// bytes of then are reused.
func (m *Metrics) SaveCounts() (json.RawMessage, func()) {
	m.mu.Lock()
	taken := m.unsaved
	if m.gated {
		m.unsaved = map[prometheus.Counter]float64{}
	}
	if !m.countsChanged && m.countsSaved != nil && len(taken) == 0 {
		// Nothing counted, released or made since: the same values.
		b := m.countsSaved
		m.mu.Unlock()
		return b, func() {}
	}
	m.countsChanged = false
	labels := make([]string, 0, len(m.servers))
	for l, s := range m.servers {
		if s.dirty {
			s.saved = m.saveServer(l, s, taken)
			s.dirty = false
		}
		if s.saved != nil {
			labels = append(labels, l)
		}
	}
	sort.Strings(labels)
	// As json.Marshal of a savedCounts would write it, from the servers'
	// own bytes.
	n := len(`{"servers":[]}`)
	for _, l := range labels {
		n += len(m.servers[l].saved) + 1
	}
	b := append(make([]byte, 0, n), `{"servers":[`...)
	for i, l := range labels {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m.servers[l].saved...)
	}
	b = append(b, "]}"...)
	m.countsSaved = b
	m.mu.Unlock()
	return b, func() {
		for c, n := range taken {
			c.Add(n)
		}
	}
}

// saveServer returns the JSON of the server s labelled label as
// SaveCounts saves it, counting taken (the counts waiting for this save)
// and its held counts; nil when every series is at zero: the server does
// not keep its label across the restart for series at zero. m.mu must be
// held.
func (m *Metrics) saveServer(label string, s *serverLabels, taken map[prometheus.Counter]float64) []byte {
	value := func(c prometheus.Counter, h *heldCounts) float64 {
		v := counterValue(c) + taken[c]
		if h != nil {
			v += h.counts[c]
		}
		return v
	}
	put := func(dst *map[string]float64, key string, v float64) {
		if v <= 0 {
			return
		}
		if *dst == nil {
			*dst = map[string]float64{}
		}
		(*dst)[key] = v
	}
	ss := savedServer{Server: label, Held: s.findingsHeld != nil}
	for k, c := range s.findingSeries {
		dst := &ss.Findings
		if k.withdrawn {
			dst = &ss.Withdrawn
		}
		put(dst, k.kind+"/"+k.severity, value(c, s.findingsHeld))
	}
	tool := func(name string) *savedTool {
		if ss.Tools == nil {
			ss.Tools = map[string]*savedTool{}
		}
		if ss.Tools[name] == nil {
			ss.Tools[name] = &savedTool{}
		}
		return ss.Tools[name]
	}
	for name, cs := range s.callTools {
		var st savedTool
		for o, c := range cs.outcomes {
			put(&st.Calls, o, value(c, cs.held))
		}
		for k, c := range cs.failures {
			put(&st.Failures, k[0]+"/"+k[1], value(c, cs.held))
		}
		if st.Calls != nil || st.Failures != nil {
			t := tool(name)
			t.Calls, t.Failures, t.CallsHeld = st.Calls, st.Failures, cs.held != nil
		}
	}
	for name, ws := range s.writeTools {
		var st savedTool
		for state, c := range ws.states {
			put(&st.Writes, string(state), value(c, ws.held))
		}
		for mv, c := range ws.moves {
			put(&st.Rejudged, string(mv[0])+"/"+string(mv[1]), value(c, ws.held))
		}
		if st.Writes != nil || st.Rejudged != nil {
			t := tool(name)
			t.Writes, t.Rejudged, t.WritesHeld = st.Writes, st.Rejudged, ws.held != nil
		}
	}
	if ss.Findings == nil && ss.Withdrawn == nil && ss.Tools == nil {
		return nil
	}
	b, err := json.Marshal(ss) // map keys sorted: the same values, the same bytes
	if err != nil {
		return nil // not reached: plain strings and finite numbers
	}
	return b
}

// RestoreCounts begins the counters at the values SaveCounts saved (read
// from the state file at start, before anything is counted; after
// SeedLastFindings, which may have made the servers' series): each
// server's series are made again, at their values, or, for a group whose
// first counts no scrape had shown (Held, CallsHeld, WritesHeld), at zero
// with those counts held for the scrapers as at its first event. A server
// takes its label again under Options.MaxServers, before any traffic, and
// its tools theirs under Options.MaxToolsPerServer; past the caps, or
// with a name that cannot be a label, their counts go under "other".
// Values that are not positive finite numbers, and kinds, severities,
// outcomes, codes, retry actions, states and moves that are no label
// values, are passed over. A file of a release before rcn49 has no tools:
// the call and write series start at zero. An error when b cannot be
// read: nothing is restored then.
func (m *Metrics) RestoreCounts(b json.RawMessage) error {
	var sc savedCounts
	if err := json.Unmarshal(b, &sc); err != nil {
		return fmt.Errorf("cannot read the saved counters: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ss := range sc.Servers {
		label := ss.Server
		if m.servers[label] == nil && label != Other {
			if m.mayLabel(label) {
				m.seen++
			} else {
				label = Other
			}
		}
		s := m.newServer(label, ss.Held)
		s.dirty = true
		if h := s.findingsHeld; h != nil && !ss.Held {
			// Made held by SeedLastFindings, before this: a scrape showed
			// these series with their counts, which must not go back to
			// zero.
			m.release(h)
		}
		for _, list := range []struct {
			withdrawn bool
			series    map[string]float64
		}{{false, ss.Findings}, {true, ss.Withdrawn}} {
			for name, v := range list.series {
				kind, severity, ok := savedLabels(name)
				if !ok || !countable(v) {
					continue
				}
				m.restore(s.findingsHeld, m.findingCounter(label, s, list.withdrawn, kind, severity), v)
			}
		}
		for _, name := range slices.Sorted(maps.Keys(ss.Tools)) {
			m.restoreTool(label, s, m.tool(s, name), ss.Tools[name])
		}
	}
	m.countsChanged = true
	return nil
}

// restoreTool begins the call and write series of the tool labelled tool
// of the server s (labelled label) at the values st saved. m.mu must be
// held.
func (m *Metrics) restoreTool(label string, s *serverLabels, tool string, st *savedTool) {
	if st == nil {
		return
	}
	if st.Calls != nil || st.Failures != nil {
		// Held again when it was held, or when the tool's series are new
		// here (another saved tool took "other" first, shown): a series
		// shown at its value does not go back to zero, one never shown is
		// not born above it.
		cs := m.callSeriesOf(label, s, tool, st.CallsHeld)
		if cs.held != nil && !st.CallsHeld {
			m.release(cs.held)
		}
		for o, v := range st.Calls {
			if c := cs.outcomes[o]; c != nil && countable(v) {
				m.restore(cs.held, c, v)
			}
		}
		for name, v := range st.Failures {
			i := strings.LastIndexByte(name, '/')
			if i < 0 || !countable(v) {
				continue
			}
			code, action := name[:i], name[i+1:]
			if m.code(code) != code || actionLabel(audit.RetryAction(action)) != action {
				continue
			}
			m.restore(cs.held, m.failureSeries(label, cs, code, action), v)
		}
	}
	if st.Writes != nil || st.Rejudged != nil {
		ws := m.writeSeriesOf(label, s, tool, st.WritesHeld)
		if ws.held != nil && !st.WritesHeld {
			m.release(ws.held)
		}
		for state, v := range st.Writes {
			if c := ws.states[audit.WriteState(state)]; c != nil && countable(v) {
				m.restore(ws.held, c, v)
			}
		}
		for name, v := range st.Rejudged {
			from, to, _ := strings.Cut(name, "/")
			if ws.states[audit.WriteState(from)] == nil || ws.states[audit.WriteState(to)] == nil || !countable(v) {
				continue
			}
			m.restore(ws.held, m.moveSeries(label, tool, ws, audit.WriteState(from), audit.WriteState(to)), v)
		}
	}
}

// restore adds v, a saved value, to c, or holds it in h (not nil) for the
// scrapers. m.mu must be held.
func (m *Metrics) restore(h *heldCounts, c prometheus.Counter, v float64) {
	if h != nil {
		h.made[c] = true
		h.counts[c] += v
		return
	}
	c.Add(v)
}

// countable reports whether v, read from a state file, is a value a
// counter can begin at: positive and finite.
func countable(v float64) bool {
	return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v)
}

// savedLabels returns the kind and severity of a saved series'
// "kind/severity", and whether both are label values the findings
// counters use.
func savedLabels(name string) (kind, severity string, ok bool) {
	kind, severity, _ = strings.Cut(name, "/")
	kindOK := kind == Other || slices.Contains(audit.Kinds, audit.Kind(kind))
	sevOK := slices.Contains([]audit.Severity{audit.SeverityInfo, audit.SeverityWarning, audit.SeverityCritical}, audit.Severity(severity))
	return kind, severity, kindOK && sevOK
}

// RecountFinding counts f in FindingsTotal, and nothing else: a finding
// the store holds that the replay at a restart made again after the saved
// marks, which the run before counted after its last save (lost with it in
// a crash). As Finding counts it otherwise.
func (m *Metrics) RecountFinding(f *audit.Finding) { m.Finding(f) }

// counterValue returns c's value.
func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}
