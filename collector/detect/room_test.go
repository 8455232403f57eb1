package detect_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestMaxSources replays a generated capture the way senders that name
// many sources deliver it (each source 1, 3 or 5 s behind), with detect.max_sources far below the sources
// named, and expects the findings, write states and calls judged of the
// same deliveries without the bound; and each partition's status to list
// at most the bound (and its overflow source).
func TestMaxSources(t *testing.T) {
	c := capgen.Generate(capgen.Config{Seed: 21, Sessions: 1500, Span: 30 * time.Minute, AnomalyRate: 0.35, NoiseRate: 0.01})
	recs := readRecords(t, c.Lines)
	t0 := recs[0].Call.Time
	for _, tc := range []struct {
		name string
		// source names the source of a call.
		source func(server, session string, at time.Time) string
		// overflow says whether calls must overflow (every source busy)
		// or sources be displaced (the quiet ones make room).
		overflow bool
	}{
		// A rolling deploy every minute: each pod its own source, quiet
		// once replaced. The oldest quiet pods make room; none overflows.
		{"quiet_sources_displaced", func(server, _ string, at time.Time) string {
			return fmt.Sprintf("%s/pod-%d", server, at.Sub(t0)/time.Minute)
		}, false},
		// 40 posters per server, all sending all along.
		{"busy_sources_overflow", func(server, session string, _ time.Time) string {
			return fmt.Sprintf("%s/poster-%d", server, hashOf(session)%40)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deliveries := func() []delivered {
				var ds []delivered
				for _, r := range recs {
					src := tc.source(r.Call.Server, r.Call.Session, r.Call.Time)
					ds = append(ds, delivered{r, src, endOf(r).Add(time.Duration(1+2*(hashOf(src)%3)) * time.Second)})
				}
				return ds
			}
			run := func(max int) (*outcome, []detect.PartitionStatus) {
				cfg := detect.NewDefaultConfig()
				cfg.MaxSources = max
				var e *detect.Engine
				o := live(cfg, deliveries(), func(x *detect.Engine) { e = x; x.ClockPerPartition() })
				return o, e.Status(recs[len(recs)-1].Call.Time)
			}
			want, wantStatus := run(100000)
			const max = 3
			got, status := run(max)
			compare(t, tc.name, want, got)
			if got.stats.Calls != want.stats.Calls {
				t.Errorf("%d calls judged; want %d, as without the bound", got.stats.Calls, want.stats.Calls)
			}
			if got.stats.TooLate != want.stats.TooLate {
				t.Errorf("%d calls too late; want %d, as without the bound", got.stats.TooLate, want.stats.TooLate)
			}
			named := 0
			for _, ps := range wantStatus {
				named += len(ps.Sources)
			}
			if named <= 2*max {
				t.Fatalf("without the bound the partitions list %d sources: the test needs more than %d", named, max)
			}
			var overflow, displaced int64
			for _, ps := range status {
				kept := 0
				for _, s := range ps.Sources {
					if s.Overflow {
						if s.Name != detect.OverflowSource {
							t.Errorf("%s: the overflow source is named %q", ps.Server, s.Name)
						}
						continue
					}
					kept++
				}
				if kept > max {
					t.Errorf("%s: the status lists %d sources; want at most max_sources, %d", ps.Server, kept, max)
				}
				overflow += ps.OverflowCalls
				displaced += ps.SourcesDisplaced
			}
			if tc.overflow && overflow == 0 {
				t.Errorf("no call overflowed with %d busy sources per partition and max_sources %d", 40, max)
			}
			if !tc.overflow && overflow != 0 {
				t.Errorf("%d calls overflowed; want none: quiet sources make room", overflow)
			}
			if !tc.overflow && displaced == 0 {
				t.Errorf("no quiet source displaced")
			}
			t.Logf("%d sources named without the bound; %d calls overflowed, %d sources displaced", named, overflow, displaced)
		})
	}
}

func TestConfig_MaxSources(t *testing.T) {
	f := func(max int, valid bool) {
		t.Helper()
		cfg := detect.NewDefaultConfig()
		cfg.MaxSources = max
		if err := cfg.Validate(); (err == nil) != valid {
			t.Errorf("max_sources %d: Validate() = %v; want valid %v", max, err, valid)
		}
	}
	f(1000, true)
	f(1, true)
	f(0, false)
	f(-5, false)
}

// BenchmarkAdd_Sources is the engine's cost of a call from one source of
// a partition that keeps n other sources, all active: every delivery
// recomputes the partition's watermark over them (Engine.bound). It tells
// whether detect.max_sources alone bounds that cost well enough:
//
//	GOMAXPROCS=1 go test ./collector/detect -run '^$' -bench 'Add_Sources' -benchtime 20000x
func BenchmarkAdd_Sources(b *testing.B) {
	for _, n := range []int{1, 100, 1000, 30000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			cfg := detect.NewDefaultConfig()
			cfg.MaxSources = n + 1
			cfg.JoinWait = 0 // the watermark is recomputed from the first call
			e := detect.NewEngine(cfg, findingSink(func(*audit.Finding) {}))
			e.ClockPerPartition()
			e.PackWaiting()
			wall := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			line := func(i int, at time.Time) []byte {
				return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d/%d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/%d.gram","rev":4,"hash":"bb"}}}}`,
					at.Format(time.RFC3339Nano), i, i, i%50, i, i%50)
			}
			var lines [][]byte
			for i := range n {
				lines = append(lines, line(i, wall))
			}
			for i := range b.N {
				lines = append(lines, line(n+i, wall.Add(time.Duration(i)*time.Microsecond)))
			}
			recs := readRecords(b, lines)
			for i, r := range recs[:n] {
				e.Add(fmt.Sprintf("poster-%d", i), r, wall)
			}
			recs = recs[n:]
			b.ResetTimer()
			for i, r := range recs {
				at := wall.Add(time.Duration(i) * time.Microsecond)
				e.Add("steady", r, at.Add(time.Millisecond))
			}
		})
	}
}

// BenchmarkTouch_Sources is the engine's cost of a refused delivery
// (Engine.Touch, told of each request refused under back-pressure or a
// store outage) when the engine keeps n sources over 10 partitions, a
// tenth of them each: the source's clocks, one per partition it feeds,
// are found by its name.
//
//	GOMAXPROCS=1 go test ./collector/detect -run '^$' -bench 'Touch_Sources' -benchtime 20000x
func BenchmarkTouch_Sources(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			cfg := detect.NewDefaultConfig()
			cfg.MaxSources = n
			e := detect.NewEngine(cfg, findingSink(func(*audit.Finding) {}))
			e.ClockPerPartition()
			wall := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			var lines [][]byte
			for i := range n {
				lines = append(lines, fmt.Appendf(nil, `{"time":%q,"server":"srv-%d","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d/a.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/a.gram","rev":4,"hash":"bb"}}}}`,
					wall.Format(time.RFC3339Nano), i%10, i, i, i))
			}
			names := make([]string, n)
			for i, r := range readRecords(b, lines) {
				names[i] = fmt.Sprintf("poster-%d", i)
				e.Add(names[i], r, wall)
			}
			b.ResetTimer()
			for i := range b.N {
				e.Touch("", names[i%n], wall.Add(time.Duration(i)*time.Microsecond))
			}
		})
	}
}
