package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// testResponses: a call sent again under a stored id keeps the first
// response stored, in every store; a store that compares responses
// (audit.ResponseComparer) tells which of the calls it skipped answered
// otherwise than the stored call, and only those: not the same response
// written otherwise, not a call without a response, not a span that says
// too little of its response, not another tenant's call of the same id.
func testResponses(t *testing.T, s audit.Store) {
	const spanSource = "otlp_grpc:resourceSpans[0].scopeSpans[0].spans[3]"
	kept1, kept2 := rec(1, 1, "a.gram"), rec(2, 2, "a.gram")
	// A span that recorded neither result nor error payload: it answered,
	// with content unknown.
	span := rec(4, 4, "a.gram")
	span.Call.Result, span.Call.Source = nil, spanSource
	appendCalls(t, s, kept1, kept2, span)

	same := rec(1, 1, "a.gram")
	same.Call.Result = []byte(`{ "structuredContent" : {"rev":1}, "isError": false }`)
	other := rec(1, 1, "a.gram")
	other.Call.Result = []byte(`{"isError":false,"structuredContent":{"rev":99}}`)
	errorInstead := failed(rec(2, 2, "a.gram"), "E_STORAGE", audit.ActionVerifyThenDecide)
	fresh, freshOther := rec(3, 3, "a.gram"), rec(3, 3, "a.gram")
	freshOther.Call.Result = []byte(`{"isError":true}`)
	tenant := rec(1, 1, "a.gram")
	tenant.Call.Tenant = "globex"
	tenant.Call.Result = []byte(`{"isError":false,"structuredContent":{"rev":98}}`)
	// The record of the span's exchange, with its response: the span
	// said too little to tell them apart.
	spanRecord := failed(rec(4, 4, "a.gram"), "E_STORAGE", audit.ActionVerifyThenDecide)
	noResponse := timedOut(rec(1, 1, "a.gram"))
	batch := []audit.Record{same, other, errorInstead, fresh, freshOther, tenant, spanRecord, noResponse}
	wantDiffer := []int{1, 2, 4}

	c, compares := s.(audit.ResponseComparer)
	for round := range 2 {
		if !compares {
			appendCalls(t, s, batch...)
			continue
		}
		n, held, differ, err := c.AppendCallsCompared(ctx(t), batch)
		if err != nil {
			t.Fatalf("round %d: AppendCallsCompared: %v", round, err)
		}
		checkHeld(t, len(batch), n, held, differ)
		if want := 2 - 2*round; n != want {
			t.Errorf("round %d: AppendCallsCompared stored %d calls, want %d", round, n, want)
		}
		if !reflect.DeepEqual(differ, wantDiffer) {
			t.Errorf("round %d: calls with another response under a stored id = %v, want %v", round, differ, wantDiffer)
		}
	}
	if !compares {
		t.Logf("the store does not compare responses (audit.ResponseComparer): only the responses kept are checked")
	}
	want := []*audit.Call{kept1.Call, kept2.Call, fresh.Call, span.Call}
	got := scan(t, s, time.Time{})
	var acme []*audit.Call
	for _, c := range got {
		if c.Tenant == "acme" {
			acme = append(acme, c)
		}
	}
	diffCalls(t, acme, want)
	if len(got) != len(acme)+1 {
		t.Errorf("stored %d calls of other tenants, want 1", len(got)-len(acme))
	}
}

// checkHeld checks AppendCallsCompared's report of the calls it held (a
// copy of each was stored before, or earlier in the request): every call
// not stored for the first time, in order, and among them the ones whose
// response differs. The pipeline names a call counted too late only when
// it is not held, so a call held and not reported would have its stored
// copy, which may have been judged, passed over after a restart.
func checkHeld(t *testing.T, calls, stored int, held, differ []int) {
	t.Helper()
	if len(held) != calls-stored {
		t.Errorf("AppendCallsCompared held %v of %d calls, %d stored for the first time: want every call not stored held", held, calls, stored)
	}
	in := map[int]bool{}
	for i, h := range held {
		if h < 0 || h >= calls || (i > 0 && h <= held[i-1]) {
			t.Errorf("AppendCallsCompared held %v: not indexes of the calls in order", held)
			break
		}
		in[h] = true
	}
	for _, d := range differ {
		if !in[d] {
			t.Errorf("AppendCallsCompared reports call %d differing but not held (held %v)", d, held)
		}
	}
}
