package detect_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestPendingCount_Random: the pending-write count a partition keeps as
// writes enter and leave pending, and the latest end of their windows,
// equal a walk of the windows at every status, over random deliveries:
// two sources per server, one of them late in random backlogs (windows
// deferred for it), jumps of the clock past windows' ends, and restarts
// (a new engine replaying every call delivered so far, as serve's
// recovery does, and going on).
func TestPendingCount_Random(t *testing.T) {
	var statuses, counted int
	t.Cleanup(detect.SetPendingCheck(func(n, walkN int, until, walkUntil time.Time) {
		statuses++
		if n > 0 {
			counted++
		}
		if n != walkN || !until.Equal(walkUntil) {
			t.Errorf("kept %d pending until %v, a walk of the windows %d until %v", n, until, walkN, walkUntil)
		}
	}))
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 34))
		c := capgen.Generate(capgen.Config{Seed: int64(seed) + 21, Sessions: 800, Span: 12 * time.Minute, AnomalyRate: 0.5})
		recs := readRecords(t, c.Lines)
		type delivery struct {
			r    *audit.Record
			src  string
			wall time.Time
		}
		ds := make([]delivery, len(recs))
		for i, r := range recs {
			d := delivery{r: r, src: "on-time-" + r.Call.Server, wall: r.Call.Time.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)}
			if rng.IntN(3) == 0 {
				// A backlog: delivered up to 100 s late, within the
				// allowed lateness, or past it now and then.
				d.src = "backlog-" + r.Call.Server
				d.wall = r.Call.Time.Add(time.Duration(rng.IntN(100_000)+rng.IntN(2)*rng.IntN(60_000)) * time.Millisecond)
			}
			ds[i] = d
		}
		slices.SortStableFunc(ds, func(a, b delivery) int { return a.wall.Compare(b.wall) })
		newEngine := func() *detect.Engine {
			e := detect.NewEngine(detect.NewDefaultConfig())
			e.ClockPerPartition()
			e.DropRepeatedIDs()
			return e
		}
		e := newEngine()
		var delivered []*audit.Record
		restarts := 0
		shift := time.Duration(0) // how far the clock has jumped ahead
		for i, d := range ds {
			wall := d.wall.Add(shift)
			e.Add(d.src, d.r, wall)
			delivered = append(delivered, d.r)
			what := rng.IntN(600)
			if i == len(ds)/2 {
				what = 0 // at least one restart
			}
			switch what {
			case 0:
				// A restart: a new engine replays what was delivered, in
				// time order, and the sources go on.
				restarts++
				e = newEngine()
				replay := slices.Clone(delivered)
				slices.SortStableFunc(replay, func(a, b *audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
				for _, r := range replay {
					e.Add("mcpaudit/recovery", r, wall)
				}
			case 1:
				// The wall clock jumps past every window open now.
				shift += 6 * time.Minute
				wall = wall.Add(6 * time.Minute)
			}
			e.Tick(wall)
			if i%3 == 0 {
				e.Status(wall)
			}
		}
		if restarts == 0 {
			t.Errorf("seed %d: no restart", seed)
		}
		e.Flush()
		e.Status(ds[len(ds)-1].wall.Add(shift + time.Hour))
	}
	if counted < 100 || statuses < 1000 {
		t.Errorf("%d statuses, %d with writes pending: too few to test the count", statuses, counted)
	}
	t.Logf("%d statuses, %d with writes pending", statuses, counted)
}
