package pipeline_test

import (
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// TestLateOrders_WithdrawalsTold delivers every example's calls in every
// order of TestLateOrders_Examples and checks what the sinks were told
// (the metrics: mcpaudit_findings_total less
// mcpaudit_findings_withdrawn_total) against what stands in the store:
// each finding told once more than it was withdrawn when it stands, as
// often as it was withdrawn when it does not. Found from outside (out25
// O2): withdrawn duplicate_create findings were not told the sinks, so the
// counters said 454 findings stood where the store listed 448; the gate
// told only unverified_write, unsafe_retry, wasted_retry and
// premature_retry withdrawals, from before double_applied_write,
// duplicate_create and request_id_reuse were withdrawn too.
func TestLateOrders_WithdrawalsTold(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no examples under testdata/examples")
	}
	// Counted by the orders, which run in parallel (eachLateOrder).
	var withdrawals atomic.Int64
	type capture struct {
		name       string
		scen, tail [][]byte
	}
	var captures []capture
	for _, path := range files {
		scen, tail := exampleLines(t, path)
		captures = append(captures, capture{strings.TrimSuffix(filepath.Base(path), ".ndjson"), scen, tail})
	}
	// Three creates of one title: the first, delivered late, takes the
	// pair the later two made (a withdrawn duplicate_create).
	scen, tail := exampleLines(t, "../../testdata/examples/oddlynew-duplicate-create.ndjson")
	third := strings.NewReplacer(`"2026-11-02T09:00:23.007Z"`, `"2026-11-02T09:00:41.500Z"`, `"id":2`, `"id":4`,
		"c101-7e55-9f7d-b1ff69ef7335", "c101-7e55-9f7d-b1ff69ef7999", "doc_aa1e8a644aa207ed", "doc_aa1e8a644aa20999").Replace(string(scen[1]))
	captures = append(captures, capture{"three_creates", append(slices.Clone(scen), []byte(third)), tail})
	for _, c := range captures {
		t.Run(c.name, func(t *testing.T) {
			eachLateOrder(t, c.scen, c.tail, func(t *testing.T, rec *recorder, want judged) {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				for id, n := range rec.withdrawn {
					withdrawals.Add(int64(n))
					if rec.findings[id] == 0 {
						t.Errorf("finding %s withdrawn %d times, never told", id, n)
					}
				}
				for id, n := range rec.findings {
					stands := 0
					if _, ok := want.findings[id]; ok {
						stands = 1
					}
					if got := n - rec.withdrawn[id]; got != stands {
						t.Errorf("finding %s: told %d times, withdrawn %d: the counters say %d stand, the store %d (%s)",
							id, n, rec.withdrawn[id], got, stands, want.findings[id])
					}
				}
			})
		})
	}
	if withdrawals.Load() == 0 {
		t.Error("no withdrawal told in any order: the test shows nothing")
	}
}
