package detect_test

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestDetector_NotApplied: a write whose request the relay knows never
// reached the server (not_sent), or that the server refused by HTTP status
// before it ran (http_4NN), is rejected, not uncertain: the agent's retry
// under a new key is no unsafe retry and no double application. A reset or
// a gateway's 502 proves nothing: the retry is unsafe as before.
func TestDetector_NotApplied(t *testing.T) {
	retry := func(t *testing.T, transportError string, kinds ...audit.Kind) *sink {
		t.Helper()
		s := &scenario{}
		s.call(0, tg, "s1", "gram_patch", patch("a.gram", 1, "r1", "x"), transportError)
		s.call(5*sec, tg, "s1", "gram_patch", patch("a.gram", 1, "r2", "x"), okDoc("a.gram", 2, "synced"))
		return s.want(t, kinds...)
	}
	for _, te := range []string{"not_sent", "http_400", "http_404", "http_401", "http_429"} {
		t.Run("thegram_new_id_after_"+te, func(t *testing.T) {
			got := retry(t, te)
			if st := got.states(); st[audit.StateRejected] != 1 || st[audit.StateDurable] != 1 {
				t.Fatalf("write states %v, want one rejected and one durable", st)
			}
		})
	}
	for _, te := range []string{"connection_reset", "timeout", "http_502", "http_503", "connection_refused"} {
		t.Run("thegram_new_id_after_"+te, func(t *testing.T) {
			retry(t, te, audit.KindUnsafeRetry, audit.KindUnverifiedWrite)
		})
	}
	t.Run("oddlynew_create_without_key_after_not_sent", func(t *testing.T) {
		js := `async () => await documents.createDocument({ title: "Plan", type: "note" })`
		s := &scenario{}
		s.call(0, on, "s1", "run", code(js), "not_sent")
		s.call(5*sec, on, "s1", "run", code(js), runOK(obj{"documentId": "doc_1", "action": "created", "title": "Plan", "type": "note"}, ledger(create, "succeeded")))
		s.want(t)
	})
	t.Run("oddlynew_create_without_key_after_reset", func(t *testing.T) {
		js := `async () => await documents.createDocument({ title: "Plan", type: "note" })`
		s := &scenario{}
		s.call(0, on, "s1", "run", code(js), "connection_reset")
		s.call(5*sec, on, "s1", "run", code(js), runOK(obj{"documentId": "doc_1", "action": "created", "title": "Plan", "type": "note"}, ledger(create, "succeeded")))
		s.want(t, audit.KindUnsafeRetry, audit.KindUnverifiedWrite)
	})
}
