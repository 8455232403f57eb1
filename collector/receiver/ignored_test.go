package receiver_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/receiver"
)

// TestCalls_IgnoredCounted: records of other methods than tools/call are
// counted in the answer to /v1/calls as ignored (capture-format.md: such
// spans are "counted"), so that accepted, rejected and ignored account for
// every record of the body. adv22 posted 100 lines and was answered
// {"accepted":56,"rejected":0}: 44 lines were not mentioned.
func TestCalls_IgnoredCounted(t *testing.T) {
	e := newEnv(t, nil)
	other := func(method string, i int) string {
		return strings.Replace(record("thegram", "gram_read", now.Add(time.Duration(i)*time.Millisecond), i), `"tools/call"`, `"`+method+`"`, 1)
	}
	t.Run("mixed", func(t *testing.T) {
		lines := []string{
			record("thegram", "gram_read", now, 1),
			other("tools/list", 2),
			other("initialize", 3),
			record("thegram", "gram_read", now.Add(time.Millisecond), 4),
			other("m-weird", 5),
			record("bad\xff", "gram_read", now, 6),
		}
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(strings.Join(lines, "\n")+"\n"))
		var resp receiver.CallsResponse
		if err := json.Unmarshal([]byte(a.body), &resp); err != nil {
			t.Fatal(err)
		}
		if a.status != 200 || resp.Accepted != 2 || resp.Rejected != 1 || resp.Ignored != 3 {
			t.Fatalf("%d %s, want 200 with 2 accepted, 1 rejected and 3 ignored", a.status, a.body)
		}
	})
	t.Run("only_others", func(t *testing.T) {
		// No call to store: 400 as before, and the answer says what
		// became of the lines.
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(other("tools/list", 7)+"\n"+other("ping", 8)+"\n"))
		if a.status != 400 || !strings.Contains(a.body, `"ignored":2`) || !strings.Contains(a.body, "no tools/call") {
			t.Fatalf("%d %s, want 400 with 2 ignored and no tools/call exchange", a.status, a.body)
		}
	})
	t.Run("none_ignored", func(t *testing.T) {
		a := e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(record("thegram", "gram_read", now.Add(9*time.Millisecond), 9)+"\n"))
		if a.status != 200 || !strings.Contains(a.body, `"ignored":0`) {
			t.Fatalf("%d %s, want 200 with \"ignored\":0", a.status, a.body)
		}
	})
}
