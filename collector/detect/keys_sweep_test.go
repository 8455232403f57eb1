package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestKeyInUseForHours: one client sends every write under the same
// request_id (what request_id_reuse reports), one a second, for five and
// a half hours of event time. What the key remembers stays within the
// correlation horizon (its uses, the reuses reported) instead of growing
// with every use, and each reuse is still reported once.
func TestKeyInUseForHours(t *testing.T) {
	const n = 20000
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	var findings int
	e := NewEngine(NewDefaultConfig(), countFindings(func() { findings++ }))
	rd := dialect.NewReader(dialect.Config{})
	for i := range n {
		at := start.Add(time.Duration(i) * time.Second)
		line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s1","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"d/%d.gram","base_revision":3,"expected_hash":"aa","request_id":"req-same","operations":[{"op":"append_block","target":"h1","text":"t%d"}]}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/%d.gram","rev":4,"hash":"bb","replayed":false,"request_id":"req-same","sync":{"state":"synced"}}}}}`,
			at.Format(time.RFC3339Nano), i+1, i%50, i, i+1, i%50)
		r := leanRecord(t, rd, line)
		e.Add("poster", r, at.Add(time.Second))
	}
	e.Flush()
	ks := e.parts[PartitionKey{Server: "thegram"}].det.keys.get(keyHash(keyID{"request_id", "req-same"}))
	if ks == nil {
		t.Fatal("the key is not held")
	}
	// Uses within the horizon stay, and those since the last sweep (the
	// sweep runs every allowance or eighth of a window) and within the
	// lateness, one a second; the binder is kept from before.
	every := min(e.cfg.CorrelationWindow/8, e.cfg.AllowedLateness)
	limit := int((e.cfg.horizon()+every+e.cfg.Lateness)/time.Second) + 2
	reused := 0
	if ks.ru != nil {
		reused = len(ks.ru.base.reported) + len(ks.ru.tail.reported) + len(ks.ru.made) + len(ks.ru.refusals)
	}
	// The reuse rule keeps the intents reported within a window twice:
	// after the items no call can come before any more (its base) and
	// after all of them (rid23).
	if len(ks.events) > limit || reused > 2*limit {
		t.Errorf("after %d uses the key holds %d uses and %d reported reuses; at most %d may stay", n, len(ks.events), reused, limit)
	}
	// Every use is a reuse of the key's binder (each write is a new edit),
	// except a use more than the correlation window after the binder,
	// which binds the key anew.
	want, binder := 0, 0
	for i := 1; i < n; i++ {
		if time.Duration(i-binder)*time.Second > e.cfg.CorrelationWindow {
			binder = i
			continue
		}
		want++
	}
	if findings != want {
		t.Errorf("%d findings, want %d reuses", findings, want)
	}
}

type countFindings func()

func (countFindings) Call(*audit.Record)                   {}
func (countFindings) Write(*audit.Write, audit.WriteState) {}
func (f countFindings) Finding(*audit.Finding)             { f() }
