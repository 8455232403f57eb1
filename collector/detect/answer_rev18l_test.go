package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestOnAnswer_EitherOrder (review rev18l): one exchange under one call
// id, one observation without its response and one with it, reaches the
// engine in either order (two requests acknowledged concurrently: the
// store took the unanswered one first, the engine may take the answer
// first) and with the answer dated before or after the other within the
// millisecond. The store holds the answer aside in every case where it
// stored the unanswered copy first, so the engine must name the call each
// time it merges the two; it named it only when the observation it kept
// was the unanswered one.
func TestOnAnswer_EitherOrder(t *testing.T) {
	rd := dialect.NewReader(dialect.Config{})
	t0 := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	line := func(at time.Time, answered bool) []byte {
		resp := ""
		if answered {
			resp = `,"response":{"id":1,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"team/x.gram","rev":4,"hash":"bb","replayed":false,"request_id":"req-1"}}}`
		}
		return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s0","request":{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"team/x.gram","base_revision":3,"expected_hash":"aa","request_id":"req-1","operations":[{"op":"append_block","target":"h1","text":"x"}]}}}%s}`,
			at.Format(time.RFC3339Nano), resp)
	}
	f := func(answerFirst bool, answerSkew time.Duration) {
		t.Helper()
		e := NewEngine(NewDefaultConfig())
		var named []string
		e.OnAnswer(func(c *audit.Call) { named = append(named, c.ID) })
		u := leanRecord(t, rd, line(t0, false))
		a := leanRecord(t, rd, line(t0.Add(answerSkew), true))
		if u.Call.ID != a.Call.ID {
			t.Fatalf("ids %s and %s, want one", u.Call.ID, a.Call.ID)
		}
		wall := t0.Add(time.Second)
		if answerFirst {
			e.Add("server", a, wall)
			e.Add("client", u, wall)
		} else {
			e.Add("client", u, wall)
			e.Add("server", a, wall)
		}
		if len(named) != 1 || named[0] != u.Call.ID {
			t.Errorf("answer first %v, skew %s: named %v, want the call once", answerFirst, answerSkew, named)
		}
	}
	f(false, 0)
	f(false, 300*time.Microsecond)
	f(false, -300*time.Microsecond)
	f(true, 0)
	f(true, 300*time.Microsecond)
	f(true, -300*time.Microsecond)
}
