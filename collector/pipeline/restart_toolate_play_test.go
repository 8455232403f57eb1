package pipeline_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// traffic is thegram's live traffic in the restart tests: at each tick
// every source not held back sends a harmless read (callLine) a second
// old, in session "s-"+source, in each tenant, and the clock moves on a
// second. r is the run it goes to: a restart replaces it.
type traffic struct {
	t       testing.TB
	r       *run
	sources []string
	// tenants send in this order; nil is the default tenant alone.
	tenants []string
	rpc     int
}

// newTraffic is the traffic of sources ("pod-0" and "pod-1" when none) to r.
func newTraffic(t testing.TB, r *run, sources ...string) *traffic {
	if len(sources) == 0 {
		sources = []string{"pod-0", "pod-1"}
	}
	return &traffic{t: t, r: r, sources: sources}
}

// tick sends one read from every source but those held and moves the
// clock on a second.
func (tr *traffic) tick(held ...string) {
	tr.t.Helper()
	now := tr.r.clock.Now()
	tenants := tr.tenants
	if tenants == nil {
		tenants = []string{""}
	}
	for _, tenant := range tenants {
		for _, src := range tr.sources {
			if slices.Contains(held, src) {
				continue
			}
			tr.rpc++
			b := batch(tr.t, src, callLine("thegram", "s-"+src, tr.rpc, now.Add(-time.Second)))
			if tenant != "" {
				b = inTenant(b, tenant)
			}
			if _, err := tr.r.ingest(b); err != nil {
				tr.t.Fatal(err)
			}
		}
	}
	tr.r.clock.Add(time.Second)
}

// ticks is n ticks with the sources held sending nothing.
func (tr *traffic) ticks(n int, held ...string) {
	tr.t.Helper()
	for range n {
		tr.tick(held...)
	}
}

// send hands the run b and returns it.
func (tr *traffic) send(b audit.Batch) audit.Batch {
	tr.t.Helper()
	if _, err := tr.r.ingest(b); err != nil {
		tr.t.Fatal(err)
	}
	return b
}

// stored is what a restart must not change in the store: the state of
// every write, the findings, the write counts (the SLO's) and the bad
// writes by cause.
type stored struct {
	writes   map[string]audit.WriteState
	findings []string
	counts   map[audit.WriteState]int64
	causes   []audit.CauseCount
}

// stopStored stops r and returns what its store holds.
func stopStored(t testing.TB, r *run) stored {
	t.Helper()
	ctx := context.Background()
	counts, err := r.store.WriteCounts(ctx, audit.CountQuery{})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := r.store.BadWriteCounts(ctx, audit.BadWriteQuery{})
	if err != nil {
		t.Fatal(err)
	}
	o := r.stop()
	return stored{writes: o.writes, findings: slices.Sorted(maps.Keys(o.findings)), counts: counts, causes: bad.Causes}
}

// sameAfterRestart fails t for each part of got, stored after a restart,
// that differs from want, stored by the same traffic without one.
func sameAfterRestart(t testing.TB, got, want stored) {
	t.Helper()
	if !maps.Equal(got.writes, want.writes) {
		t.Errorf("write states after a restart %v, without one %v", got.writes, want.writes)
	}
	if !slices.Equal(got.findings, want.findings) {
		t.Errorf("findings after a restart %v, without one %v", got.findings, want.findings)
	}
	if !maps.Equal(got.counts, want.counts) {
		t.Errorf("write counts (the SLO's) after a restart %v, without one %v", got.counts, want.counts)
	}
	if !slices.Equal(got.causes, want.causes) {
		t.Errorf("bad writes by cause after a restart %v, without one %v", got.causes, want.causes)
	}
}

// restartPlay is a scenario of the too-late tests, played over a new data
// directory with or without a restart: 20 ticks of traffic, then live,
// then (restart) end and a run opened again a second later, then 400
// ticks (past the writes' windows, 5 m, and the lateness bounds), then
// last; it returns what the store holds at the end.
type restartPlay struct {
	// open opens a run over dir; nil is openRun.
	open func(t testing.TB, dir string, clock *testClock) *run
	// tenants of the traffic; nil is the default tenant alone.
	tenants []string
	// live plays what comes before the restart.
	live func(tr *traffic)
	// end ends the first run at the restart; nil is a clean stop.
	end func(r *run)
	// last, when set, checks the last run before it stops.
	last func(r *run)
}

// play plays p once, with a restart when restart is set.
func (p restartPlay) play(t *testing.T, restart bool) stored {
	t.Helper()
	dir := t.TempDir()
	clock := newClock(wallStart)
	open := p.open
	if open == nil {
		open = func(t testing.TB, dir string, clock *testClock) *run { return openRun(t, dir, clock, nil, nil) }
	}
	tr := newTraffic(t, open(t, dir, clock))
	tr.tenants = p.tenants
	tr.ticks(20)
	p.live(tr)
	if restart {
		if p.end != nil {
			p.end(tr.r)
		} else {
			tr.r.stop()
		}
		clock.Add(time.Second)
		tr.r = open(t, dir, clock)
	}
	tr.ticks(400)
	if p.last != nil {
		p.last(tr.r)
	}
	return stopStored(t, tr.r)
}
