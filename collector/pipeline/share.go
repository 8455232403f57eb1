package pipeline

import (
	"fmt"
	"sync"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TenantShareError is returned by Ingest when, with more than half of
// serve.pipeline.max_open_calls taken, a tenant would hold more than its
// share: the calls it has acknowledged and not yet judged, plus the
// request's, pass the budget divided among the tenants admitted. Nothing
// of the request was stored.
// It wraps audit.ErrOverloaded (retryable); other tenants are admitted
// meanwhile.
type TenantShareError struct {
	Tenant string
	// Held is what the tenant holds open, Request what the request would
	// add: together past Share, though Held alone may be under it.
	Held, Request, Share int64
}

func (e *TenantShareError) Error() string {
	return fmt.Sprintf("tenant %q holds %d open calls and the request %d more, past its share of serve.pipeline.max_open_calls, %d: %v",
		e.Tenant, e.Held, e.Request, e.Share, ErrOpenState)
}

// TenantShare names the tenant refused: the receiver counts such a refusal
// apart from a full pipeline (reason "tenant_share").
func (e *TenantShareError) TenantShare() string { return e.Tenant }

// Unwrap makes the error an ErrOpenState (and so audit.ErrOverloaded).
func (e *TenantShareError) Unwrap() error { return ErrOpenState }

// tenantLoad counts, per tenant, the calls acknowledged and not yet
// judged: queued for the engine, or waiting in it for their watermark.
type tenantLoad struct {
	mu     sync.Mutex
	queued map[string]int64
	// open is the engine's count as of its last take or tick.
	open map[string]int64
	// scratch is filled by the engine goroutine and swapped with open.
	scratch map[string]int64
	// holders are the sources partitions with calls waiting hold their
	// watermarks for, as of the engine's last take or tick; holdersNext is
	// filled by the engine goroutine and swapped with it.
	holders, holdersNext map[detect.SourceName]bool
}

// countTenants returns how many calls of each tenant a request holds.
func countTenants(batches ...audit.Batch) map[string]int64 {
	m := map[string]int64{}
	for _, b := range batches {
		for _, r := range b.Records {
			m[r.Call.Tenant]++
		}
	}
	return m
}

// reserveShare checks every tenant of a request against its share of
// the open-call budget, and counts the request's calls as queued when all
// may go on. A tenant's share is max_open_calls divided by the tenants
// admitted (those with a partition in use); it is enforced once the
// budget is half taken, so that a busy tenant is not refused while the
// budget is mostly free. One tenant whose exporter lags, holding its
// partitions back, is refused past its share while the others are
// admitted, into the half left at least. Alone, a tenant has the whole
// budget. A request of holders only (holdsBack) is not refused: its calls
// are counted, and taking them lets the watermark move.
func (p *Pipeline) reserveShare(n map[string]int64, holder bool) error {
	tenants := int64(max(p.admittedTenants(), len(n), 1))
	budget := int64(p.cfg.MaxOpenCalls)
	share := budget / tenants
	var total int64
	for _, c := range n {
		total += c
	}
	pressed := p.open.Load()+p.inflight.Load()+total > budget/2
	l := &p.load
	l.mu.Lock()
	defer l.mu.Unlock()
	for t, c := range n {
		// Alone, a tenant's share is the budget: the check of the whole
		// (Ingest) refuses it, as a full pipeline, not as a share.
		if held := l.queued[t] + l.open[t]; tenants > 1 && pressed && !holder && held+c > share {
			return &TenantShareError{Tenant: t, Held: held, Request: c, Share: share}
		}
	}
	for t, c := range n {
		l.queued[t] += c
	}
	return nil
}

// unqueue counts calls of tenants as no longer queued: taken by the
// engine, or refused after all.
func (p *Pipeline) unqueue(n map[string]int64) {
	l := &p.load
	l.mu.Lock()
	defer l.mu.Unlock()
	for t, c := range n {
		if l.queued[t] -= c; l.queued[t] <= 0 {
			delete(l.queued, t)
		}
	}
}

// countOpen takes the engine's count of waiting calls, in total and per
// tenant. Engine goroutine.
func (p *Pipeline) countOpen() {
	l := &p.load
	if l.scratch == nil {
		l.scratch = map[string]int64{}
	}
	if l.holdersNext == nil {
		l.holdersNext = map[detect.SourceName]bool{}
	}
	p.open.Store(int64(p.eng.BufferedBy(l.scratch)))
	p.eng.HoldingBack(l.holdersNext)
	l.mu.Lock()
	l.open, l.scratch = l.scratch, l.open
	l.holders, l.holdersNext = l.holdersNext, l.holders
	l.mu.Unlock()
}

// holdsBack reports whether every batch of a request comes from a source
// that a partition with calls waiting holds its watermark for (as of the
// engine's last take or tick). Such a request is taken past
// max_open_calls and the tenant's share: refused, the source would keep
// the watermark where it is while it retries (a refusal is a sign of
// life), and with it every call waiting behind it.
func (p *Pipeline) holdsBack(batches []audit.Batch) bool {
	l := &p.load
	l.mu.Lock()
	defer l.mu.Unlock()
	some := false
	for _, b := range batches {
		if len(b.Records) == 0 {
			continue
		}
		if !l.holders[detect.SourceName{Tenant: b.Records[0].Call.Tenant, Name: b.Source}] {
			return false
		}
		some = true
	}
	return some
}

// admittedTenants counts the tenants with a partition admitted.
func (p *Pipeline) admittedTenants() int {
	a := &p.admit
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.perTenant)
}
