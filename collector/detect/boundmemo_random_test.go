package detect

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestBoundMemo_Random: random deliveries, ticks, touches, expiries and
// restores, in the live service's mode (ClockPerPartition) and with
// sources shared by partitions, small max_sources, short idle and lag
// limits: TestMain checks every bound taken from a memo (written in
// review; with shared sources it found the hold a resume moves).
func TestBoundMemo_Random(t *testing.T) {
	var diffs []string
	old := memoCheck
	used := 0
	memoCheck = func(k PartitionKey, wall time.Time, diff string) {
		used++
		if diff != "" {
			diffs = append(diffs, fmt.Sprintf("%v at %v: %s", k.Server, wall, diff))
		}
		old(k, wall, diff)
	}
	defer func() { memoCheck = old }()
	rd := dialect.NewReader(dialect.Config{})
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		cfg := NewDefaultConfig()
		cfg.JoinWait = time.Duration(r.IntN(3)) * time.Second
		cfg.IdleTimeout = time.Duration(2+r.IntN(6)) * time.Second
		cfg.MaxClockLag = time.Duration(5+r.IntN(40)) * time.Second
		cfg.AllowedLateness = time.Duration(5+r.IntN(60)) * time.Second
		cfg.MaxSources = 1 + r.IntN(3)
		e := NewEngine(cfg, countFindings(func() {}))
		if seed%2 == 0 {
			e.ClockPerPartition()
		}
		if r.IntN(2) == 0 {
			e.ReplaySource("replay")
		}
		id := 0
		wall := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		lags := map[string]time.Duration{}
		srcs := []string{"a", "b", "c", "d", "e", "replay"}
		for _, s := range srcs {
			lags[s] = time.Duration(r.IntN(60000)) * time.Millisecond
		}
		for step := 0; step < 400; step++ {
			wall = wall.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
			if r.IntN(40) == 0 {
				wall = wall.Add(time.Duration(r.IntN(60)) * time.Second)
			}
			server := []string{"s1", "s2"}[r.IntN(2)]
			src := srcs[r.IntN(len(srcs))]
			switch op := r.IntN(20); {
			case op < 14:
				id++
				at := wall.Add(-lags[src] - time.Duration(r.IntN(2000))*time.Millisecond)
				if r.IntN(30) == 0 {
					lags[src] = time.Duration(r.IntN(90000)) * time.Millisecond
				}
				line := fmt.Appendf(nil, `{"time":%q,"server":%q,"session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d.gram","rev":4,"hash":"bb"}}}}`,
					at.Format(time.RFC3339Nano), server, id, id, id)
				rec := leanRecord(t, rd, line)
				if r.IntN(15) == 0 {
					e.AddRefused(src, rec, wall)
				} else {
					e.Add(src, rec, wall)
				}
			case op < 16:
				e.Tick(wall)
			case op < 17:
				e.Touch("", src, wall)
				e.Tick(wall)
			case op < 18:
				e.ExpireIdle(wall, time.Duration(5+r.IntN(30))*time.Second)
				e.Tick(wall)
			case op < 19:
				k := PartitionKey{Server: server}
				if p := e.parts[k]; p != nil {
					e.HoldAfterRestart(k, p.wm.Add(time.Duration(r.IntN(10))*time.Second), wall.Add(time.Duration(r.IntN(20))*time.Second))
				}
				e.Tick(wall)
			default:
				k := PartitionKey{Server: server}
				q := e.QuietSources(wall)
				for _, sc := range q[k] {
					e.RestoreQuietSource(k, sc, wall)
				}
				e.RestoreSource(k, SourceClock{Name: src, Clock: wall.Add(-lags[src])}, wall, time.Duration(r.IntN(5))*time.Second)
				e.Tick(wall)
			}
			m := map[SourceName]bool{}
			e.HoldingBack(m)
			if len(diffs) > 0 {
				t.Fatalf("seed %d step %d: %s", seed, step, diffs[0])
			}
			if d := namedDiff(e); d != "" {
				t.Fatalf("seed %d step %d: %s", seed, step, d)
			}
		}
	}
	if used < 1000 {
		t.Errorf("only %d bounds were taken from a memo: the steps no longer exercise it", used)
	}
	t.Logf("%d memo bounds checked", used)
}

// namedDiff says how the engine's sources by name (Engine.named, which
// Touch reads) differ from its sources, or "" when they hold the same.
func namedDiff(e *Engine) string {
	n := 0
	for k, s := range e.sources {
		if !slices.Contains(e.named[[2]string{k.tenant, k.name}], s) {
			return fmt.Sprintf("source %v is not among the sources named so", k)
		}
	}
	for k, ss := range e.named {
		if len(ss) == 0 {
			return fmt.Sprintf("no source named %v is kept", k)
		}
		for _, s := range ss {
			if e.sources[s.key] != s {
				return fmt.Sprintf("source %v named, not kept", s.key)
			}
			n++
		}
	}
	if n != len(e.sources) {
		return fmt.Sprintf("%d sources named, %d kept", n, len(e.sources))
	}
	return ""
}
