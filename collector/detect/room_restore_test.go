package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestRestore_MoreSourcesThanMaxSources: a state file written with more
// sources per partition than max_sources (a larger max_sources before, or
// a release without it) restores at most max_sources of them; the
// delivering ones left out hold the partition through its overflow
// source, the quiet ones left out are dropped. What the engine writes to
// the next state file, and its status, stay within the bound, and a
// source left out that delivers again is judged.
func TestRestore_MoreSourcesThanMaxSources(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.MaxSources = 3
	e := NewEngine(cfg, countFindings(func() {}))
	e.ClockPerPartition()
	k := PartitionKey{Server: "thegram"}
	wall := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i := range 10 {
		e.RestoreSource(k, SourceClock{Name: fmt.Sprintf("pod-%d", i), Clock: wall.Add(-time.Duration(20-i) * time.Second), Seen: wall.Add(-time.Second)}, wall, time.Minute)
	}
	for i := range 4 {
		e.RestoreQuietSource(k, SourceClock{Name: fmt.Sprintf("slow-%d", i), Clock: wall.Add(-3 * time.Minute), Seen: wall.Add(-time.Minute), Lag: 3 * time.Minute, HoldFor: 10 * time.Minute}, wall)
	}
	p := e.parts[k]
	kept := 0
	for _, s := range p.sources {
		if !s.overflow {
			kept++
		}
	}
	if kept != cfg.MaxSources {
		t.Errorf("%d sources restored; want max_sources, %d", kept, cfg.MaxSources)
	}
	if len(e.sources) != cfg.MaxSources {
		t.Errorf("the engine knows %d sources by name; want %d", len(e.sources), cfg.MaxSources)
	}
	if p.overflow == nil {
		t.Fatal("no overflow source: the delivering sources left out hold nothing")
	}
	// pod-9 was the latest of those left out.
	if want := wall.Add(-11 * time.Second); !p.overflow.max.Equal(want) {
		t.Errorf("the overflow source's clock is %v; want the latest of the sources it took, %v", p.overflow.max, want)
	}
	if n := len(e.ActiveSources(wall, "")[k]); n > cfg.MaxSources {
		t.Errorf("%d sources to write to the state file; want at most %d", n, cfg.MaxSources)
	}
	if n := len(e.QuietSources(wall)[k]); n != 0 {
		t.Errorf("%d quiet sources to write to the state file; want none (no room for them)", n)
	}
	st := e.Status(wall)
	if len(st) != 1 || len(st[0].Sources) != cfg.MaxSources+1 {
		t.Fatalf("the status lists %v; want one partition with max_sources sources and the overflow one", st)
	}
	// A source left out delivers again: no room (the restored ones are
	// in their grace), so its call goes to the overflow source, judged.
	rd := dialect.NewReader(dialect.Config{})
	line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s","request":{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":1,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d.gram","rev":4,"hash":"bb"}}}}`,
		wall.Add(-time.Second).Format(time.RFC3339Nano))
	e.Add("pod-7", leanRecord(t, rd, line), wall.Add(time.Second))
	if p.overflowCalls != 1 || p.Counts.Calls != 1 {
		t.Errorf("overflow calls %d, calls %d; want 1 and 1", p.overflowCalls, p.Counts.Calls)
	}
	if len(p.sources) != cfg.MaxSources+1 {
		t.Errorf("%d sources after a left-out one delivered; want %d", len(p.sources), cfg.MaxSources+1)
	}

	// Two delivering sources and four quiet ones: the first quiet one
	// takes the place left, and the others do not take its place.
	e = NewEngine(cfg, countFindings(func() {}))
	e.ClockPerPartition()
	for i := range 2 {
		e.RestoreSource(k, SourceClock{Name: fmt.Sprintf("pod-%d", i), Clock: wall.Add(-time.Second), Seen: wall.Add(-time.Second)}, wall, time.Minute)
	}
	for i := range 4 {
		e.RestoreQuietSource(k, SourceClock{Name: fmt.Sprintf("slow-%d", i), Clock: wall.Add(-3 * time.Minute), Seen: wall.Add(-time.Minute), Lag: 3 * time.Minute, HoldFor: 10 * time.Minute}, wall)
	}
	quiet := e.QuietSources(wall)[k]
	if len(quiet) != 1 || quiet[0].Name != "slow-0" {
		t.Errorf("quiet sources restored %v; want slow-0 alone", quiet)
	}
	if p := e.parts[k]; p.displaced != 0 || p.overflow != nil {
		t.Errorf("%d sources displaced, overflow %v; want none", p.displaced, p.overflow != nil)
	}
}
