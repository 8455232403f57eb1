package metrics

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
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

// savedCounts is what the state file keeps of the counters: every
// server's series (SaveCounts with full set), or those changed since the
// save before (a delta, without full), which RestoreCounts applies on
// top of the values before it.
type savedCounts struct {
	Servers []savedServer `json:"servers"`
}

// savedServer is one server label's series, each with its value: every
// count made on it, shown or not; series at zero are left out, and a
// server with none. Held is set while its first findings counts wait for
// the scrapers (Options.FirstScrapeWait): no scrape showed them, and a
// start holds them again behind the series at zero. Findings and
// Withdrawn are by "kind/severity"; Tools by tool label (a release before
// rcn49 saved none). In a delta, SameFindings says that Held, Findings and
// Withdrawn did not change (they are left out), and Tools holds only the
// tools whose series changed, each whole: the others are as before.
type savedServer struct {
	Server       string                `json:"server"`
	SameFindings bool                  `json:"same_findings,omitempty"`
	Held         bool                  `json:"held,omitempty"`
	Findings     map[string]float64    `json:"findings,omitempty"`
	Withdrawn    map[string]float64    `json:"withdrawn,omitempty"`
	Tools        map[string]*savedTool `json:"tools,omitempty"`
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
// that go on across restarts, nor the latencies (the pending gauge goes
// on):
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
// written. Counts made after it wait for the next save. With full, the
// values of every series; else only what changed since the last call,
// full or not (nil when nothing did): the servers, and of each its
// findings and the tools, with a count made, held or released since
// (savedServer), for RestoreCounts to apply on top of the values saved
// before. Only a server's findings or tool with a change is computed
// again: the others' bytes are reused.
func (m *Metrics) SaveCounts(full bool) (json.RawMessage, func()) {
	m.mu.Lock()
	taken := m.unsaved
	if m.gated {
		m.unsaved = map[prometheus.Counter]float64{}
	}
	if !m.countsChanged && len(taken) == 0 && (!full || m.countsSaved != nil) {
		// Nothing counted, released or made since: the same values.
		b := m.countsSaved
		if !full {
			b = nil
		}
		m.mu.Unlock()
		return b, func() {}
	}
	m.countsChanged = false
	labels := slices.Sorted(maps.Keys(m.servers))
	var b []byte
	if !full {
		b = append(b, `{"servers":[`...)
	}
	entries := 0
	for _, l := range labels {
		s := m.servers[l]
		if !s.dirty {
			continue
		}
		findings, tools := m.saveServer(s, taken)
		if full || (!findings && len(tools) == 0) {
			continue
		}
		// The server's changes alone.
		if entries > 0 {
			b = append(b, ',')
		}
		entries++
		b = appendServer(b, l, s, findings, tools)
	}
	if full {
		n := len(`{"servers":[]}`)
		for _, l := range labels {
			n += savedSize(m.servers[l]) + len(l) + 32
		}
		b = append(make([]byte, 0, n), `{"servers":[`...)
		for _, l := range labels {
			s := m.servers[l]
			if !s.saved.counted && len(s.saved.tools) == 0 {
				continue // every series at zero
			}
			if entries > 0 {
				b = append(b, ',')
			}
			entries++
			b = appendServer(b, l, s, true, nil)
		}
	}
	b = append(b, "]}"...)
	if full {
		m.countsSaved = b
	} else {
		// Assembled again at the next full save.
		m.countsSaved = nil
		if entries == 0 {
			b = nil
		}
	}
	m.mu.Unlock()
	return b, func() {
		for c, n := range taken {
			c.Add(n)
		}
	}
}

// savedSize returns the bytes SaveCounts saved of s's series.
func savedSize(s *serverLabels) int {
	n := len(s.saved.findings)
	for _, t := range s.saved.tools {
		n += len(t) + 1
	}
	return n
}

// serverSaved is what SaveCounts saved of a server's series, as JSON: its
// findings (`,"held":true,"findings":{...},"withdrawn":{...}`, empty
// when its findings series are all at zero and not held) and its tools, each
// `"name":{...}` (a savedTool; none for a tool whose series are all at
// zero).
type serverSaved struct {
	findings []byte
	counted  bool // a findings series is above zero
	tools    map[string][]byte
}

// changed notes that a count of the tool labelled tool of s (a findings
// series when empty) changed what SaveCounts saves of s.
func (s *serverLabels) changed(tool string) {
	s.dirty = true
	if tool == "" {
		s.findingsDirty = true
		return
	}
	if s.dirtyTools == nil {
		s.dirtyTools = map[string]bool{}
	}
	s.dirtyTools[tool] = true
}

// appendServer appends to b the JSON of the server s labelled label as
// SaveCounts saves it (a savedServer): with findings, its findings, else
// same_findings; its tools named in tools, or every one when tools is
// nil.
func appendServer(b []byte, label string, s *serverLabels, findings bool, tools []string) []byte {
	b = append(b, `{"server":`...)
	b = appendJSONString(b, label)
	if findings {
		b = append(b, s.saved.findings...)
	} else {
		b = append(b, `,"same_findings":true`...)
	}
	if tools == nil {
		tools = slices.Sorted(maps.Keys(s.saved.tools))
	}
	n := 0
	for _, t := range tools {
		part := s.saved.tools[t]
		if part == nil {
			continue
		}
		if n == 0 {
			b = append(b, `,"tools":{`...)
		} else {
			b = append(b, ',')
		}
		n++
		b = append(b, part...)
	}
	if n > 0 {
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJSONString appends s to b as a JSON string (as encoding/json
// writes it: a label value may hold any valid UTF-8, control characters
// included).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// appendTool appends st to b as encoding/json writes it (keys sorted,
// empty members left out), without its reflection and maps' copies: a
// save at the caps writes thousands of them.
func appendTool(b []byte, st *savedTool) []byte {
	b = append(b, '{')
	n := 0
	sep := func() {
		if n > 0 {
			b = append(b, ',')
		}
		n++
	}
	if st.CallsHeld {
		sep()
		b = append(b, `"calls_held":true`...)
	}
	if st.WritesHeld {
		sep()
		b = append(b, `"writes_held":true`...)
	}
	for _, part := range []struct {
		name   string
		series map[string]float64
	}{{"calls", st.Calls}, {"failures", st.Failures}, {"writes", st.Writes}, {"rejudged", st.Rejudged}} {
		if len(part.series) == 0 {
			continue
		}
		sep()
		b = append(append(append(b, '"'), part.name...), `":{`...)
		for i, k := range slices.Sorted(maps.Keys(part.series)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendJSONString(b, k), ':')
			b = appendNumber(b, part.series[k])
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendNumber appends v, a finite value, as encoding/json writes it.
func appendNumber(b []byte, v float64) []byte {
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		q, _ := json.Marshal(v)
		return append(b, q...)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// saveServer computes again what SaveCounts saves of the parts of s
// with a change (its findings, its tools), counting taken (the counts
// waiting for this save) and its held counts, and returns whether its
// findings changed and which tools did, in order. m.mu must be held.
func (m *Metrics) saveServer(s *serverLabels, taken map[prometheus.Counter]float64) (findings bool, tools []string) {
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
	findings = s.allDirty || s.findingsDirty
	if findings {
		var ss savedServer
		for k, c := range s.findingSeries {
			dst := &ss.Findings
			if k.withdrawn {
				dst = &ss.Withdrawn
			}
			put(dst, k.kind+"/"+k.severity, value(c, s.findingsHeld))
		}
		s.saved.findings = s.saved.findings[:0]
		if s.findingsHeld != nil {
			// Kept with the tools' counts even without a finding's: a
			// start holds the server's findings series again.
			s.saved.findings = append(s.saved.findings, `,"held":true`...)
		}
		s.saved.counted = ss.Findings != nil || ss.Withdrawn != nil
		for _, part := range []struct {
			name   string
			series map[string]float64
		}{{"findings", ss.Findings}, {"withdrawn", ss.Withdrawn}} {
			if part.series == nil {
				continue
			}
			b, _ := json.Marshal(part.series) // keys sorted; plain strings and finite numbers
			s.saved.findings = append(append(append(append(s.saved.findings, `,"`...), part.name...), `":`...), b...)
		}
	}
	if s.allDirty {
		for name := range s.callTools {
			s.changed(name)
		}
		for name := range s.writeTools {
			s.changed(name)
		}
	}
	tools = slices.Sorted(maps.Keys(s.dirtyTools))
	if s.saved.tools == nil {
		s.saved.tools = map[string][]byte{}
	}
	for _, name := range tools {
		var st savedTool
		if cs := s.callTools[name]; cs != nil {
			for o, c := range cs.outcomes {
				put(&st.Calls, o, value(c, cs.held))
			}
			for k, c := range cs.failures {
				put(&st.Failures, k[0]+"/"+k[1], value(c, cs.held))
			}
			st.CallsHeld = cs.held != nil && (st.Calls != nil || st.Failures != nil)
		}
		if ws := s.writeTools[name]; ws != nil {
			for state, c := range ws.states {
				put(&st.Writes, string(state), value(c, ws.held))
			}
			for mv, c := range ws.moves {
				put(&st.Rejudged, string(mv[0])+"/"+string(mv[1]), value(c, ws.held))
			}
			st.WritesHeld = ws.held != nil && (st.Writes != nil || st.Rejudged != nil)
		}
		if st.Calls == nil && st.Failures == nil && st.Writes == nil && st.Rejudged == nil {
			delete(s.saved.tools, name)
			continue
		}
		part := append(appendJSONString(s.saved.tools[name][:0], name), ':')
		s.saved.tools[name] = appendTool(part, &st)
	}
	s.dirty, s.allDirty, s.findingsDirty = false, false, false
	clear(s.dirtyTools)
	return findings, tools
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
// the call and write series start at zero. The values are saved, the
// first by a full SaveCounts and each after it by the next SaveCounts
// (full or not): each is applied on top of those before it. An error when
// one cannot be read: nothing is restored then.
func (m *Metrics) RestoreCounts(saved ...json.RawMessage) error {
	sc, err := foldCounts(saved)
	if err != nil {
		return err
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
		s.dirty, s.allDirty = true, true
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

// foldCounts returns the values of saved (RestoreCounts) with each
// applied on top of those before it.
func foldCounts(saved []json.RawMessage) (savedCounts, error) {
	var sc savedCounts
	at := map[string]int{}
	for i, b := range saved {
		var next savedCounts
		if err := json.Unmarshal(b, &next); err != nil {
			return savedCounts{}, fmt.Errorf("cannot read the saved counters (%d of %d): %w", i+1, len(saved), err)
		}
		for _, ss := range next.Servers {
			j, ok := at[ss.Server]
			if !ok {
				at[ss.Server] = len(sc.Servers)
				ss.SameFindings = false
				sc.Servers = append(sc.Servers, ss)
				continue
			}
			old := &sc.Servers[j]
			if !ss.SameFindings {
				old.Held, old.Findings, old.Withdrawn = ss.Held, ss.Findings, ss.Withdrawn
			}
			if len(ss.Tools) > 0 && old.Tools == nil {
				old.Tools = map[string]*savedTool{}
			}
			maps.Copy(old.Tools, ss.Tools)
		}
	}
	return sc, nil
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
