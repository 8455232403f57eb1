package detect

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// kindSink collects the kinds of the findings made.
type kindSink struct{ kinds *[]string }

func (kindSink) Call(*audit.Record)                   {}
func (kindSink) Write(*audit.Write, audit.WriteState) {}
func (s kindSink) Finding(f *audit.Finding)           { *s.kinds = append(*s.kinds, string(f.Kind)) }

// slowPods feeds an engine with a clock per partition, as the live service
// does, from two pods of thegram: pod-a with a right clock, pod-b with a
// clock 3 minutes slow (less than max_clock_lag, so current). Each pod's
// spans reach the collector a second after they end.
type slowPods struct {
	t     *testing.T
	e     *Engine
	rd    *dialect.Reader
	kinds []string
	id    int
}

const (
	podA     = "otlp:thegram/pod-a"
	podB     = "otlp:thegram/pod-b"
	podBSlow = 3 * time.Minute
)

func newSlowPods(t *testing.T) *slowPods {
	f := &slowPods{t: t, rd: dialect.NewReader(dialect.Config{})}
	f.e = NewEngine(NewDefaultConfig(), kindSink{&f.kinds})
	f.e.ClockPerPartition()
	return f
}

// read delivers, at wall, a read of a document of its own by pod src that
// started a second before, dated by src's clock.
func (f *slowPods) read(src string, wall time.Time) {
	f.id++
	at := wall.Add(-time.Second)
	if src == podB {
		at = at.Add(-podBSlow)
	}
	b := []byte(`{"time":"` + at.Format(time.RFC3339Nano) + `","server":"thegram","session":"bg","request":{"id":` +
		strconv.Itoa(f.id) + `,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"bg/` + strconv.Itoa(f.id) +
		`.gram"}}},"response":{"id":` + strconv.Itoa(f.id) + `,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"bg/` +
		strconv.Itoa(f.id) + `.gram","rev":1,"hash":"aa","sync":{"state":"synced"}}}}}`)
	f.e.Add(src, leanRecord(f.t, f.rd, b), wall)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// doubleApply returns the spec's example of a timeout, a re-read and a
// rebased re-send (testdata/examples/thegram-timeout-reread-double-apply:
// double_applied_write) as pod-b records it when the exchange begins at
// wall time start: each call dated by pod-b's clock, and the wall time its
// span reaches the collector (a second after it ends; the timed-out patch
// 30 s after it began, after the re-read and the re-send).
func (f *slowPods) doubleApply(start time.Time) (recs []*audit.Record, at []time.Time) {
	raw, err := os.ReadFile("../../testdata/examples/thegram-timeout-reread-double-apply.ndjson")
	if err != nil {
		f.t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))[:4] // the tail call closes nothing here
	var first time.Time
	for i, line := range lines {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			f.t.Fatal(err)
		}
		var t time.Time
		var ms int
		json.Unmarshal(m["time"], &t)
		json.Unmarshal(m["duration_ms"], &ms)
		if i == 0 {
			first = t
		}
		real := start.Add(t.Sub(first))
		m["time"] = mustJSON(real.Add(-podBSlow).Format(time.RFC3339Nano))
		b, _ := json.Marshal(m)
		recs = append(recs, leanRecord(f.t, f.rd, b))
		at = append(at, real.Add(time.Duration(ms)*time.Millisecond+time.Second))
	}
	return recs, at
}

// run delivers a minute of traffic from both pods, then nothing for pause,
// then 3 minutes more during which pod-b's client times out, re-reads and
// re-sends its edit rebased: a double application. Then an hour of quiet
// closes every window.
func (f *slowPods) run(pause time.Duration) {
	wall := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	tick := func(to time.Time) {
		for ; wall.Before(to); wall = wall.Add(200 * time.Millisecond) {
			f.e.Tick(wall)
		}
	}
	for range 60 {
		f.read(podA, wall)
		f.read(podB, wall)
		tick(wall.Add(time.Second))
	}
	tick(wall.Add(pause))
	recs, at := f.doubleApply(wall.Add(5 * time.Second))
	for range 180 {
		// pod-a first: the right clock comes back first.
		f.read(podA, wall)
		f.read(podB, wall)
		for i, r := range recs {
			if r != nil && !at[i].After(wall) {
				f.e.Add(podB, r, wall)
				recs[i] = nil
			}
		}
		tick(wall.Add(time.Second))
	}
	tick(wall.Add(time.Hour))
}

// TestSlowClockAfterQuietSpell: a pod whose clock is 3 minutes slow
// (within max_clock_lag) holds its server back by 3 minutes, and its calls
// are judged. After a 12 s pause of both pods (longer than idle_timeout)
// it must still hold it: before, the watermark moved on during the pause
// from the latest quiet clock (the right pod's), and from then on every
// call of the slow pod was 3 minutes behind it, later than
// allowed_lateness, counted too late and never judged. Found from
// outside: a timeout, a re-read and a rebased re-send on the slow pod
// after the pause lost the double_applied_write analyze finds.
func TestSlowClockAfterQuietSpell(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause time.Duration
	}{{"no_pause", 0}, {"both_pods_pause_12s", 12 * time.Second}, {"both_pods_pause_20m", 20 * time.Minute}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSlowPods(t)
			f.run(tc.pause)
			ps := f.e.Status(time.Date(2026, 12, 4, 23, 0, 0, 0, time.UTC))[0]
			for _, s := range ps.Sources {
				if s.TooLate != 0 {
					t.Errorf("%s: %d calls too late (%s to %s), want none", s.Name, s.TooLate,
						s.TooLateFrom.Format(time.TimeOnly), s.TooLateTo.Format(time.TimeOnly))
				}
			}
			n := 0
			for _, k := range f.kinds {
				if k == string(audit.KindDoubleAppliedWrite) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d double_applied_write findings, want 1 (findings: %v)", n, f.kinds)
			}
		})
	}
}

// TestSlowClockScaledDown: the pod whose clock is 3 minutes slow goes
// quiet for good (scaled down) while the right pod goes on. It holds its
// server back by its lag, as it did while it delivered, for max_clock_lag
// (15 m), and not after: then the watermark follows the right pod, its
// calls are judged as they come, and a quiet spell of the server later
// does not bring the gone pod's hold back.
func TestSlowClockScaledDown(t *testing.T) {
	f := newSlowPods(t)
	e := f.e
	wall := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	every := func(d time.Duration, pods ...string) {
		for end := wall.Add(d); wall.Before(end); {
			for _, p := range pods {
				f.read(p, wall)
			}
			wall = wall.Add(time.Second)
			e.Tick(wall)
		}
	}
	every(time.Minute, podA, podB)
	gone := wall
	every(5*time.Minute, podA)
	ps := e.Status(wall)[0]
	if ps.HeldBy != podB || ps.Lag < podBSlow {
		t.Errorf("5 minutes after pod-b went quiet: held by %q, watermark %s behind; want pod-b holding it at its lag (3m)", ps.HeldBy, ps.Lag)
	}
	// The status tells the hold: the lag it holds at, not the age of its
	// latest call (8 minutes by now), and when it ends.
	for _, s := range ps.Sources {
		if s.Name != podB {
			continue
		}
		if !s.Idle || s.HoldLag < podBSlow || s.HoldLag > podBSlow+5*time.Second || !s.HoldUntil.Equal(gone.Add(-time.Second).Add(e.cfg.MaxClockLag)) {
			t.Errorf("pod-b's status: idle %v, hold lag %s, hold until %s; want idle, holding at 3m until %s (latest call %s behind)",
				s.Idle, s.HoldLag, s.HoldUntil, gone.Add(-time.Second).Add(e.cfg.MaxClockLag), s.Lag)
		}
	}
	for _, s := range ps.Sources {
		if s.Name == podA && (s.HoldLag != 0 || !s.HoldUntil.IsZero()) {
			t.Errorf("pod-a, delivering, has a hold in its status: %s until %s", s.HoldLag, s.HoldUntil)
		}
	}
	every(gone.Add(e.cfg.MaxClockLag+2*time.Second).Sub(wall), podA)
	check := func(when string) {
		t.Helper()
		ps := e.Status(wall)[0]
		if ps.HeldBy != podA || ps.Lag > 3*time.Second || ps.Buffered > 3 {
			t.Errorf("%s: held by %q, watermark %s behind, %d calls waiting; want pod-a's clock, its calls judged as they come",
				when, ps.HeldBy, ps.Lag, ps.Buffered)
		}
	}
	check("max_clock_lag after pod-b went quiet")
	// The server goes quiet for a minute, then pod-a resumes alone.
	for end := wall.Add(time.Minute); wall.Before(end); wall = wall.Add(time.Second) {
		e.Tick(wall)
	}
	every(10*time.Second, podA)
	check("after a quiet spell of the server")
}

// TestBacklogPauseHoldsAtItsLag: a source replaying a backlog 10 minutes
// behind (within max_clock_lag, so current), catching up beside a live
// pod, pauses 30 s. It holds its partition at the lag it showed, as a slow
// clock does: the rest of its backlog comes behind the watermark by the
// pause, judged late, not by its age. Before, the partition jumped to the
// live pod's time during the pause and the rest of the backlog was too
// late (30 calls here).
func TestBacklogPauseHoldsAtItsLag(t *testing.T) {
	f := newPodFeed(t)
	e := f.e
	wall := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	back := wall.Add(-10 * time.Minute)
	feed := func(seconds int, replay bool) {
		for range seconds {
			f.add("live", wall.Add(-time.Second), wall)
			if replay {
				f.add("replay", back, wall)
				back = back.Add(2 * time.Second)
			}
			wall = wall.Add(time.Second)
			e.Tick(wall)
		}
	}
	feed(60, true)
	feed(30, false)
	feed(30, true)
	for _, s := range e.Status(wall)[0].Sources {
		if s.TooLate != 0 {
			t.Errorf("%s: %d calls too late, want none", s.Name, s.TooLate)
		}
	}
}

// TestStuckExporterBacklogHoldsNot: pod-s delivers on time beside a live
// pod, then its exporter is stuck for 90 s while it gets no traffic (a pod
// frozen, or taken out of rotation), delivers its queue (calls from before
// it stuck, 90 s late, judged late) and is gone for good. It came back
// further behind than it went: a backlog, not a slow clock, so once quiet
// it must hold its server at the lag it showed while it ran, not at the
// backlog's age. Before, the lag was learned afresh from the backlog alone
// and the server's findings waited 91 s behind the live pod for 15
// minutes (max_clock_lag) of its traffic (found from outside through
// serve, an OTel SDK exporter blocked 90 s).
func TestStuckExporterBacklogHoldsNot(t *testing.T) {
	f := newPodFeed(t)
	e := f.e
	wall := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	step := func(n int, stuck bool) {
		for range n {
			f.add("live", wall.Add(-time.Second), wall)
			if stuck {
				f.add("pod-s", wall.Add(-time.Second), wall)
			}
			wall = wall.Add(time.Second)
			e.Tick(wall)
		}
	}
	step(60, true)
	stuck := wall
	step(90, false)
	for i := 5; i > 0; i-- {
		f.add("pod-s", stuck.Add(-time.Duration(i)*time.Second), wall)
	}
	step(60, false)
	ps := e.Status(wall)[0]
	if ps.HeldBy != "live" || ps.Lag > 3*time.Second || ps.Buffered > 3 {
		t.Errorf("a minute after pod-s delivered its stuck queue and went for good: held by %q, watermark %s behind, %d calls waiting; want the live pod's clock, its calls judged as they come",
			ps.HeldBy, ps.Lag, ps.Buffered)
	}
	for _, s := range ps.Sources {
		if s.TooLate != 0 {
			t.Errorf("%s: %d calls too late, want none (the queue is judged late)", s.Name, s.TooLate)
		}
	}
	if ps.Late != 5 {
		t.Errorf("%d calls judged late, want pod-s's 5", ps.Late)
	}
}
