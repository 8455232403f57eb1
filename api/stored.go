package api

import (
	"context"
	"fmt"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// Stored is where the stored writes of a tenant and server lie, told when
// a window holds none (report.Report.Stored, SLO.Stored): writes count at
// their calls' event time, so a capture from the past, posted or analyzed
// today, lies before a window that ends now, and the report over it said
// only n/a and zeros (op46), mcpaudit slo too (op47). Until and Window are
// a window that holds them all, to give to --until and --window (until=
// and window= of /api/v1/report and /api/v1/slo).
type Stored struct {
	// First and Last are the event times of the first and the last stored
	// write (Last to the millisecond).
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Until is Last rounded up to the next minute, in the page's form
	// ("2026-12-04 14:03", UTC), and Window the whole days back from it
	// that reach First ("3d").
	Until  string `json:"until"`
	Window string `json:"window"`
}

// StoredWrites finds the first and last stored write of tenant and server
// (every server when empty), or nil when none is stored. It reads through Writes alone, which
// every store answers in time order from an index: the first page of one
// gives the first write; the last is found by bisection, each step asking
// for the first write from a time on (a few dozen reads of one row, and
// only for a report whose window is empty).
func StoredWrites(ctx context.Context, store audit.Store, tenant, server string) (*Stored, error) {
	firstFrom := func(since time.Time) (time.Time, bool, error) {
		p, err := store.Writes(ctx, audit.WriteQuery{Server: server, Tenant: tenant, Since: since, Limit: 1})
		if err != nil {
			return time.Time{}, false, fmt.Errorf("cannot find the stored writes: %w", err)
		}
		if len(p.Writes) == 0 {
			return time.Time{}, false, nil
		}
		return p.Writes[0].Time, true, nil
	}
	first, ok, err := firstFrom(time.Time{})
	if err != nil || !ok {
		return nil, err
	}
	// lo is always a stored write's time; no write is at hi or later.
	lo, step := first, time.Hour
	hi := lo.Add(step)
	for {
		t, ok, err := firstFrom(hi)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		lo, step = t, step*2
		hi = lo.Add(step)
	}
	for hi.Sub(lo) > time.Millisecond {
		mid := lo.Add(hi.Sub(lo) / 2)
		t, ok, err := firstFrom(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = t
		} else {
			hi = mid
		}
	}
	s := &Stored{First: first.UTC(), Last: lo.UTC()}
	until := s.Last.Truncate(time.Minute).Add(time.Minute)
	days := int((until.Sub(s.First) + 24*time.Hour - 1) / (24 * time.Hour))
	s.Until = until.Format("2006-01-02 15:04")
	s.Window = fmt.Sprintf("%dd", max(days, 1))
	return s, nil
}
