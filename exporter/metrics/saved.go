package metrics

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mcpaudit/mcpaudit/audit"
)

// The findings counters (FindingsTotal, FindingsWithdrawnTotal) go on
// across restarts of serve: their values are saved in the state file with
// the partitions' marks (collector/pipeline) and a start begins each series
// at its saved value. So that Prometheus never sees one go down after a
// crash (it would read a reset, and increase() would count the whole value
// again), a count is shown only once a save of the state file holds it:
// what a scrape sees is at most what the next start begins at
// (docs/metrics.md, "Findings counters across restarts").

// savedCounts is what the state file keeps of the findings counters.
type savedCounts struct {
	Servers []savedServer `json:"servers"`
}

// savedServer is one server label's findings series, each by
// "kind/severity" with its value: every count made on it, shown or not;
// series at zero are left out, and a server with none. Held is set while its first counts wait for
// the scrapers (Options.FirstScrapeWait): no scrape showed them, and a
// start holds them again behind the series at zero.
type savedServer struct {
	Server    string             `json:"server"`
	Held      bool               `json:"held,omitempty"`
	Findings  map[string]float64 `json:"findings,omitempty"`
	Withdrawn map[string]float64 `json:"withdrawn,omitempty"`
}

// GateOnSave has the findings counts shown only once SaveCounts saved
// them (its publish function ran): from then on a count waits for the
// next save of the state file. Call it before the first finding is
// counted; serve's pipeline does, when it keeps a state file.
func (m *Metrics) GateOnSave() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gated = true
	if m.unsaved == nil {
		m.unsaved = map[prometheus.Counter]float64{}
	}
}

// CountsPending reports whether findings counts were made (or released
// by the scrapers) since the last SaveCounts: the state file must be
// saved for them to be shown.
func (m *Metrics) CountsPending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.unsaved) > 0
}

// SaveCounts returns the findings counters' values to save in the state
// file (every count made, shown, held or waiting for this save), and the
// function that shows the counts waiting, to call once the file is
// written. Counts made after it wait for the next save.
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
	for l := range m.servers {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	var sc savedCounts
	for _, l := range labels {
		s := m.servers[l]
		ss := savedServer{Server: l, Held: s.findingsHeld != nil}
		for k, c := range s.findingSeries {
			v := counterValue(c) + taken[c]
			if h := s.findingsHeld; h != nil {
				v += h.counts[c]
			}
			if v <= 0 {
				continue
			}
			dst := &ss.Findings
			if k.withdrawn {
				dst = &ss.Withdrawn
			}
			if *dst == nil {
				*dst = map[string]float64{}
			}
			(*dst)[k.kind+"/"+k.severity] = v
		}
		if ss.Findings == nil && ss.Withdrawn == nil {
			// Nothing to go on from: the server does not keep its label
			// across the restart for series at zero.
			continue
		}
		sc.Servers = append(sc.Servers, ss)
	}
	// Marshalled under the lock: the values and countsSaved agree.
	b, err := json.Marshal(sc) // map keys sorted: the same values, the same bytes
	if err != nil {
		b = nil // not reached: plain strings and finite numbers
	}
	m.countsSaved = b
	m.mu.Unlock()
	return b, func() {
		for c, n := range taken {
			c.Add(n)
		}
	}
}

// RestoreCounts begins the findings series at the values SaveCounts saved
// (read from the state file at start, before any finding is counted; after
// SeedLastFindings, which may have made the servers' series): each
// server's series are made again, at their values, or, for a server whose
// first counts no scrape had shown (Held), at zero with those counts held
// for the scrapers as at its first event. A server takes its label again
// under Options.MaxServers, before any traffic; past the cap, or with a
// name that cannot be a label, its counts go under "other". Values that
// are not positive finite numbers, and kinds or severities that are no
// label values, are passed over. An error when b cannot be read: nothing
// is restored then.
func (m *Metrics) RestoreCounts(b json.RawMessage) error {
	var sc savedCounts
	if err := json.Unmarshal(b, &sc); err != nil {
		return fmt.Errorf("cannot read the saved findings counters: %w", err)
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
				if !ok || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
					continue
				}
				c := m.findingCounter(label, s, list.withdrawn, kind, severity)
				if h := s.findingsHeld; h != nil {
					h.made[c] = true
					h.counts[c] += v
					continue
				}
				c.Add(v)
			}
		}
	}
	m.countsChanged = true
	return nil
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
