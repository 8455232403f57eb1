package storetest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// PagedBadWriteCounts counts what s.BadWriteCounts(q) counts from the bad
// writes s returns page by page (Writes) and their calls (Calls by id), as
// report.Build counted them before the stores grouped them: a reference
// at a cost that follows the number of bad writes. A write's client is
// that of its call of the same tenant.
func PagedBadWriteCounts(ctx context.Context, s audit.Store, q audit.BadWriteQuery) (audit.BadWriteCounts, error) {
	var out audit.BadWriteCounts
	causes := map[audit.CauseCount]int64{}
	by := map[string]map[string]int64{"server": {}, "tool": {}, "document": {}, "client": {}}
	type key struct{ id, tenant string }
	var calls []key
	for _, st := range []audit.WriteState{audit.StateDoubleApplied, audit.StateUnverified} {
		wq := audit.WriteQuery{State: st, Server: q.Server, Tenant: q.Tenant, Since: q.Since, Until: q.Until, Limit: 1000}
		for {
			page, err := s.Writes(ctx, wq)
			if err != nil {
				return out, err
			}
			for _, w := range page.Writes {
				causes[audit.CauseCount{State: w.State, Reason: w.Reason}]++
				by["server"][w.Server]++
				by["tool"][w.Tool]++
				if w.Document != "" {
					by["document"][docKey(w)]++
				}
				calls = append(calls, key{w.CallID, w.Tenant})
			}
			if page.NextCursor == "" {
				break
			}
			wq.Cursor = page.NextCursor
		}
	}
	if q.Clients {
		clients := map[key]string{}
		for i := 0; i < len(calls); i += 1000 {
			part := calls[i:min(i+1000, len(calls))]
			ids := make([]string, len(part))
			for j, k := range part {
				ids[j] = k.id
			}
			page, err := s.Calls(ctx, audit.CallQuery{IDs: ids, Tenant: q.Tenant})
			if err != nil {
				return out, err
			}
			for _, c := range page.Calls {
				clients[key{c.Call.ID, c.Call.Tenant}] = c.Call.Client
			}
		}
		for _, k := range calls {
			c := clients[k]
			if c == "" {
				c = audit.UnknownClient
			}
			by["client"][c]++
		}
	}
	for c, n := range causes {
		c.Count = n
		out.Causes = append(out.Causes, c)
	}
	out.Servers = topNames(by["server"], q.Top)
	out.Tools = topNames(by["tool"], q.Top)
	out.Documents = topNames(by["document"], q.Top)
	out.Clients = topNames(by["client"], q.Top)
	return out, nil
}

// PagedWriteCountsByRange counts what s.WriteCountsByRange counts with one
// WriteCounts per range.
func PagedWriteCountsByRange(ctx context.Context, s audit.Store, q audit.CountQuery, bounds []time.Time) ([]map[audit.WriteState]int64, error) {
	out := []map[audit.WriteState]int64{}
	for i := 0; i+1 < len(bounds); i++ {
		q.Since, q.Until = bounds[i], bounds[i+1]
		c, err := s.WriteCounts(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// docKey is the key a bad write's document is counted under: a document
// is its server's, so two servers' documents of one path count apart.
func docKey(w audit.Write) string { return w.Document + "\x00" + w.Server }

// topNames returns the n names of m with the highest counts, ties in byte
// order of the name, then of the server (all of them when n is 0). A key
// made by docKey is a document and its server.
func topNames(m map[string]int64, n int) []audit.NameCount {
	out := make([]audit.NameCount, 0, len(m))
	for k, v := range m {
		name, server, _ := strings.Cut(k, "\x00")
		out = append(out, audit.NameCount{Name: name, Server: server, Count: v})
	}
	slices.SortFunc(out, func(a, b audit.NameCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Server, b.Server))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Bad-write mix: the names, several in each order (upper case before lower
// case, "(" and "#" before letters), so that ties at a cut depend on byte
// order.
var (
	mixServers = []string{"thegram", "oddlynew", "Zeta"}
	mixTools   = []string{"gram_patch", "gram_put", "doc_write", "Doc_write", "(raw)", "move", "delete", "z"}
	mixDocs    = []string{"", "a.gram", "b.gram", "B.gram", "notes/x.md", "notes/y.md", "(draft)", "#1", "c.gram", "d.gram", "e.gram"}
	// The empty client, the literal "(unknown)" and a missing call all
	// count as audit.UnknownClient.
	mixClients = []string{"claude", "cursor", "Cline", "", "#bot", audit.UnknownClient, "zed"}
	mixStates  = []audit.WriteState{audit.StateUnverified, audit.StateDurable, audit.StateDoubleApplied, audit.StateUnverified,
		audit.StateResolved, audit.StatePending, audit.StateDoubleApplied, audit.StateRejected}
	mixReasons = []audit.Reason{"", audit.ReasonNoResponse, audit.ReasonCommitUnknown, audit.ReasonSaveBlocked}
)

// BadWriteMix stores in s the calls and writes of four days from T0 of two
// tenants on three servers, with many tools, documents (and none) and
// clients (and none), whose counts tie at every cut of a top few: writes
// without a stored call, writes whose call is stored at another time, two
// writes of one call, a call id that both tenants stored with different
// clients, and states changed by a later commit. It returns the writes as
// stored last.
func BadWriteMix(t testing.TB, s audit.Store) []audit.Write {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs []audit.Record
	var ws []audit.Write
	for i := range 600 {
		sec := (i * 571) % (4 * 86400)
		w := write(fmt.Sprintf("c_%020x", 5000+i), 0, sec, mixStates[i%len(mixStates)], mixDocs[(i*7)%len(mixDocs)])
		w.Server = mixServers[i%len(mixServers)]
		w.Tenant = []string{"acme", "acme", "globex"}[(i/3)%3]
		w.Tool = mixTools[(i*5)%len(mixTools)]
		if w.State == audit.StateUnverified {
			w.Reason = mixReasons[(i/8)%len(mixReasons)]
		}
		if i%4 == 0 {
			w.Tool = mixTools[0] // one tool ahead of the others
		}
		ws = append(ws, w)
		if i%5 == 0 { // a second write of the call
			w2 := w
			w2.Seq, w2.Document = 1, mixDocs[(i*3+1)%len(mixDocs)]
			ws = append(ws, w2)
		}
		if i%11 == 0 {
			continue // no stored call
		}
		var docs []string
		if w.Document != "" {
			docs = []string{w.Document}
		}
		r := rec(5000+i, sec, docs...)
		r.Call.Server, r.Call.Tenant, r.Call.Tool = w.Server, w.Tenant, w.Tool
		r.Call.Client = mixClients[(i*3)%len(mixClients)]
		if i%13 == 0 {
			r.Call.Time = r.Call.Time.Add(5 * time.Second) // not at the write's time
		}
		recs = append(recs, r)
		if i%17 == 0 { // the same id in the other tenant, another client
			o := rec(5000+i, sec, docs...)
			o.Call.Server, o.Call.Tool, o.Call.Client = w.Server, w.Tool, "other-tenant"
			o.Call.Tenant = map[string]string{"acme": "globex", "globex": "acme"}[w.Tenant]
			recs = append(recs, o)
		}
	}
	if _, err := s.AppendCalls(c, recs); err != nil {
		t.Fatalf("AppendCalls: %v", err)
	}
	if err := s.Commit(c, audit.Results{Writes: ws}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	// Later states: some bad writes resolved, some durable ones found
	// double-applied.
	var later []audit.Write
	for i := range ws {
		w := &ws[i]
		switch {
		case i%9 == 0 && w.State == audit.StateUnverified:
			w.State, w.Reason = audit.StateResolved, ""
		case i%10 == 1 && w.State == audit.StateDurable:
			w.State = audit.StateDoubleApplied
		default:
			continue
		}
		later = append(later, *w)
	}
	if err := s.Commit(c, audit.Results{Writes: later}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return ws
}

func testBadWriteCounts(t *testing.T, s audit.Store) {
	ws := BadWriteMix(t, s)
	// What the mix says, without the store: the client of each call by
	// tenant and id, as BadWriteMix stored it.
	clients := map[[2]string]string{}
	for i := range 600 {
		if i%11 == 0 {
			continue
		}
		id := fmt.Sprintf("c_%020x", 5000+i)
		tenant := []string{"acme", "acme", "globex"}[(i/3)%3]
		clients[[2]string{tenant, id}] = mixClients[(i*3)%len(mixClients)]
		if i%17 == 0 {
			clients[[2]string{map[string]string{"acme": "globex", "globex": "acme"}[tenant], id}] = "other-tenant"
		}
	}
	check := func(name string, q audit.BadWriteQuery) {
		t.Helper()
		want := audit.BadWriteCounts{}
		causes := map[audit.CauseCount]int64{}
		by := map[string]map[string]int64{"server": {}, "tool": {}, "document": {}, "client": {}}
		for _, w := range ws {
			if w.State != audit.StateUnverified && w.State != audit.StateDoubleApplied ||
				q.Server != "" && w.Server != q.Server || q.Tenant != "" && w.Tenant != q.Tenant ||
				!q.Since.IsZero() && w.Time.Before(q.Since) || !q.Until.IsZero() && !w.Time.Before(q.Until) {
				continue
			}
			causes[audit.CauseCount{State: w.State, Reason: w.Reason}]++
			by["server"][w.Server]++
			by["tool"][w.Tool]++
			if w.Document != "" {
				by["document"][docKey(w)]++
			}
			if q.Clients {
				c := clients[[2]string{w.Tenant, w.CallID}]
				if c == "" {
					c = audit.UnknownClient
				}
				by["client"][c]++
			}
		}
		for c, n := range causes {
			c.Count = n
			want.Causes = append(want.Causes, c)
		}
		want.Servers, want.Tools = topNames(by["server"], q.Top), topNames(by["tool"], q.Top)
		want.Documents, want.Clients = topNames(by["document"], q.Top), topNames(by["client"], q.Top)
		got, err := s.BadWriteCounts(ctx(t), q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		paged, err := PagedBadWriteCounts(ctx(t), s, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, bc := range []*audit.BadWriteCounts{&want, &got, &paged} {
			slices.SortFunc(bc.Causes, func(a, b audit.CauseCount) int {
				return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Reason, b.Reason))
			})
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: BadWriteCounts =\n%+v\nwant\n%+v", name, got, want)
		}
		if !reflect.DeepEqual(paged, want) {
			t.Errorf("%s: counted from the pages of Writes and Calls =\n%+v\nwant\n%+v", name, paged, want)
		}
	}
	check("all", audit.BadWriteQuery{Clients: true})
	check("top 3", audit.BadWriteQuery{Top: 3, Clients: true})
	check("top 1", audit.BadWriteQuery{Top: 1, Clients: true})
	check("top 2 of a day and a half", audit.BadWriteQuery{CountQuery: audit.CountQuery{Since: at(40_000), Until: at(170_000)}, Top: 2, Clients: true})
	check("tenant", audit.BadWriteQuery{CountQuery: audit.CountQuery{Tenant: "globex"}, Top: 4, Clients: true})
	check("server and tenant", audit.BadWriteQuery{CountQuery: audit.CountQuery{Server: "Zeta", Tenant: "acme", Since: at(10_000)}, Top: 5, Clients: true})
	check("without clients", audit.BadWriteQuery{Top: 3})
	check("unknown tenant", audit.BadWriteQuery{CountQuery: audit.CountQuery{Tenant: "nobody"}, Top: 3, Clients: true})
	check("empty window", audit.BadWriteQuery{CountQuery: audit.CountQuery{Since: at(-5000), Until: at(-10)}, Top: 3, Clients: true})
}

func testWriteCountsByRange(t *testing.T, s audit.Store) {
	BadWriteMix(t, s)
	day := 24 * time.Hour
	check := func(name string, q audit.CountQuery, bounds ...time.Time) {
		t.Helper()
		got, err := s.WriteCountsByRange(ctx(t), q, bounds)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := PagedWriteCountsByRange(ctx(t), s, q, bounds)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, cs := range [][]map[audit.WriteState]int64{got, want} {
			for _, c := range cs {
				maps.DeleteFunc(c, func(_ audit.WriteState, n int64) bool { return n == 0 })
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: WriteCountsByRange =\n%v\nwant, one WriteCounts a range,\n%v", name, got, want)
		}
		var total int64
		for _, c := range got {
			for _, n := range c {
				total += n
			}
		}
		// The mix has writes in the bounds of every case but the unknown server's.
		if total == 0 && q.Server != "nowhere" && len(bounds) > 1 && bounds[0].Before(T0.Add(4*day)) && bounds[len(bounds)-1].After(T0) {
			t.Errorf("%s: no write counted", name)
		}
	}
	days := func(from time.Time, n int) []time.Time {
		var b []time.Time
		for i := range n + 1 {
			b = append(b, from.Add(time.Duration(i)*day))
		}
		return b
	}
	check("days", audit.CountQuery{}, days(T0.Truncate(day), 5)...)
	check("days from a time within an hour", audit.CountQuery{},
		append([]time.Time{at(1234)}, days(T0.Truncate(day).Add(day), 3)...)...)
	check("days, then an end within an hour", audit.CountQuery{},
		append(days(T0.Truncate(day), 3), T0.Truncate(day).Add(3*day+5*time.Hour+17*time.Minute))...)
	check("two days a range", audit.CountQuery{}, at(-3600), T0.Add(2*day), T0.Add(4*day), T0.Add(6*day))
	check("within one hour", audit.CountQuery{}, at(100), at(1000), at(3000))
	// Writes at 0 and 571 s (i = 0, 1): a write at a bound is in the range
	// it starts.
	check("bounds at writes", audit.CountQuery{}, at(0), at(571), at(572), at(2*571))
	check("server and tenant", audit.CountQuery{Server: "oddlynew", Tenant: "acme"}, days(T0.Add(-7*time.Hour+3*time.Second), 4)...)
	check("unknown server", audit.CountQuery{Server: "nowhere"}, days(T0, 2)...)
	check("one bound", audit.CountQuery{}, T0)
	check("no bound", audit.CountQuery{})
}
