package store

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
)

func TestLimits(t *testing.T) {
	f := func(got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("got %d, want %d", got, want)
		}
	}
	f(PageLimit(0), 100)
	f(PageLimit(-5), 100)
	f(PageLimit(7), 7)
	f(PageLimit(1000), 1000)
	f(PageLimit(1001), 1000)
	f(TimelineLimit(0), 1000)
	f(TimelineLimit(50000), 10000)
}

func TestCutTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &audit.Finding{Kind: audit.KindUnsafeRetry, Time: t0}
	w := &audit.Write{CallID: "c1", Time: t0, State: audit.StateDurable}
	c := &audit.Call{ID: "c1", Time: t0}
	late := &audit.Call{ID: "c0", Time: t0.Add(-time.Second)}
	events := func() []audit.TimelineEvent {
		return []audit.TimelineEvent{FindingEvent(f), WriteEvent(w), CallEvent(c, audit.OutcomeOK, nil),
			CallEvent(late, audit.OutcomeProtocolError, &audit.Failure{Code: "E_X", Action: audit.ActionFixInput})}
	}
	got := CutTimeline(events(), 3)
	var types []string
	for _, e := range got.Events {
		types = append(types, e.Type+"/"+e.CallID)
	}
	if want := []string{"call/c0", "call/c1", "write/c1"}; !reflect.DeepEqual(types, want) {
		t.Fatalf("order %v, want %v", types, want)
	}
	if got.Events[0].Code != "E_X" || got.Events[0].RetryAction != audit.ActionFixInput {
		t.Errorf("failed call event %+v lacks its code and action", got.Events[0])
	}
	// Where the rest begin: the first event cut, or an earlier time a
	// store left out.
	f2 := func(name string, p audit.TimelinePage, truncated bool, next time.Time) {
		t.Helper()
		if p.Truncated != truncated || !p.NextSince.Equal(next) {
			t.Errorf("%s: truncated %v, next_since %v; want %v, %v", name, p.Truncated, p.NextSince, truncated, next)
		}
	}
	f2("cut here", got, true, t0)
	f2("all kept", CutTimeline(events(), 4), false, time.Time{})
	f2("left out earlier", CutTimeline(events(), 3, t0.Add(-time.Millisecond)), true, t0.Add(-time.Millisecond))
	f2("left out later", CutTimeline(events(), 3, t0.Add(time.Hour), t0.Add(time.Minute)), true, t0)
	f2("left out, none cut", CutTimeline(events(), 4, t0.Add(time.Hour), t0.Add(time.Minute)), true, t0.Add(time.Minute))
}

func TestFingerprint(t *testing.T) {
	c := &audit.Call{Server: "thegram", Session: "s", RPCID: "7", Tool: "gram_read", Arguments: []byte(`{"b":1, "a":2}`)}
	c.Fingerprint = Fingerprint(c)
	if !Derived(c) {
		t.Fatal("a call's own fingerprint is not recognized as derived")
	}
	// The canonical form: key order and spacing do not matter.
	d := *c
	d.Arguments = []byte(`{"a":2,"b":1}`)
	if Fingerprint(&d) != c.Fingerprint {
		t.Error("fingerprint depends on the arguments' spacing or key order")
	}
	d.Fingerprint = "other"
	if Derived(&d) {
		t.Error("a foreign fingerprint counted as derived")
	}
	d.Fingerprint = ""
	if Derived(&d) {
		t.Error("an empty fingerprint counted as derived")
	}
}

// canonicalArgs must agree with canon.Bytes on every input: a stored
// fingerprint mark is read back with it.
func TestCanonicalArgs(t *testing.T) {
	f := func(raw string) {
		t.Helper()
		var in []byte
		if raw != "<nil>" {
			in = []byte(raw)
		}
		if got, want := canonicalArgs(in), canon.Bytes(in); !bytes.Equal(got, want) {
			t.Errorf("canonicalArgs(%q) = %q, canon.Bytes gives %q", raw, got, want)
		}
	}
	f("<nil>")
	f("")
	f(`{}`)
	f(`{"a":2,"b":1}`)
	f(`{"b":1, "a":2}`)
	f(`{"b":1,"a":2}`)
	f(`{"a":1,"a":2}`)
	f(`{"a":"x\"y\\z\n"}`)
	f(`{"a":"\u00e9"}`)
	f(`{"a":"é"}`)
	f(`{"a":"\/"}`)
	f(`[1,2.50,-0,1e3,true,null,"s"]`)
	f(`{"z":{"b":[{"d":1,"c":2}],"a":null}}`)
	f(` {"a":1}`)
	f(`{"a":1}x`)
	f(`{"a":`)
	f(`not json`)
	f(`"just a string"`)
	f(`{"\u0061":1}`)
}

func FuzzCanonicalArgs(f *testing.F) {
	for _, s := range []string{`{"b":1, "a":2}`, `{"a":2,"b":1}`, `{"a":"\u00e9"}`, `[1,{"x":[]}]`, `{"a":`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if got, want := canonicalArgs(raw), canon.Bytes(raw); !bytes.Equal(got, want) {
			t.Fatalf("canonicalArgs(%q) = %q, canon.Bytes gives %q", raw, got, want)
		}
	})
}
