package detect

import (
	"strconv"
	"testing"
	"time"
)

// TestQuietSlowSourceHoldsBesideAheadSource (out24's D2, found from outside
// in c2: SDK providers straight into serve, h2's clock 90 s slow, g3's 10
// min ahead): a partition with an on-time pod, a pod whose clock is 90 s
// slow (current: within max_clock_lag) and one whose clock is 10 minutes
// ahead (clamped to max_clock_skew). All three go quiet for 5 minutes
// (longer than the idle timeout); then the ahead pod sends one call, then
// the slow pod resumes at its 90 s lag. docs/config.md (max_clock_lag) and
// docs/detection.md ("Clocks"): a quiet slow source keeps holding its
// partition at its lag, so none of the slow pod's calls is too late. On
// main 90f28e3 ExpireIdle forgot the slow pod once it had been quiet for
// correlation_window + allowed_lateness (4 m with c2's 2 m window), its
// hold with it, and the ahead pod's call took the watermark to the wall
// clock + max_clock_skew: 29 calls too late here.
func TestQuietSlowSourceHoldsBesideAheadSource(t *testing.T) {
	const (
		onTime = "otlp:thegram/h1"
		slow   = "otlp:thegram/h2"
		ahead  = "otlp:thegram/g3"
	)
	offset := map[string]time.Duration{onTime: 0, slow: -90 * time.Second, ahead: 10 * time.Minute}
	// c2's windows: a correlation window of 2 m makes a source quiet for
	// correlation_window + allowed_lateness (4 m) forgotten (forgetQuiet)
	// long before max_clock_lag (15 m) ends its hold.
	cfg := NewDefaultConfig()
	cfg.VerifyWindow, cfg.CorrelationWindow = 20*time.Second, 2*time.Minute
	f := newSlowPods(t)
	f.e = NewEngine(cfg, kindSink{&f.kinds})
	f.e.ClockPerPartition()
	e := f.e
	id := 0
	send := func(src string, wall time.Time) {
		id++
		at := wall.Add(-time.Second).Add(offset[src])
		b := []byte(`{"time":"` + at.Format(time.RFC3339Nano) + `","server":"thegram","session":"qs","request":{"id":` +
			strconv.Itoa(id) + `,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"qs/` + strconv.Itoa(id) +
			`.gram"}}},"response":{"id":` + strconv.Itoa(id) + `,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"qs/` +
			strconv.Itoa(id) + `.gram","rev":1,"hash":"aa","sync":{"state":"synced"}}}}}`)
		e.Add(src, leanRecord(t, f.rd, b), wall)
	}
	wall := time.Date(2026, 12, 6, 22, 1, 0, 0, time.UTC)
	tick := func(d time.Duration, pods ...string) {
		for end := wall.Add(d); wall.Before(end); {
			for _, p := range pods {
				send(p, wall)
			}
			wall = wall.Add(time.Second)
			e.Tick(wall)
			// As the live service does after each commit (pipeline's
			// expireIdle).
			e.ExpireIdle(wall, max(cfg.IdleTimeout, time.Minute))
		}
	}
	tick(2*time.Minute, onTime, slow, ahead)
	gen, _ := e.Gen(PartitionKey{Server: "thegram"})
	// Every source quiet for 5 minutes (c2: 7), longer than the idle
	// timeout and than correlation_window + allowed_lateness.
	tick(5 * time.Minute)
	if g, ok := e.Gen(PartitionKey{Server: "thegram"}); !ok || g != gen {
		t.Fatalf("thegram's partition was freed in the quiet spell; the test needs it kept (c2: writes pending)")
	}
	ps := e.Status(wall)[0]
	if ps.HeldBy != slow || ps.Lag < 90*time.Second {
		t.Errorf("all quiet: held by %q, watermark %s behind; want %s holding it at its lag (90s)", ps.HeldBy, ps.Lag, slow)
	}
	send(ahead, wall)
	wall = wall.Add(time.Second)
	e.Tick(wall)
	tick(30*time.Second, slow)
	ps = e.Status(wall)[0]
	if ps.TooLate != 0 {
		t.Errorf("%d of the slow pod's calls too late (watermark %s behind the wall clock, held by %q); want none: it held its partition at its lag",
			ps.TooLate, ps.Lag, ps.HeldBy)
	}
}
