package pipeline

import (
	"fmt"
	"sync"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// ServerLimitError is returned by Admit for a server that would be a new
// partition of a tenant already at serve.pipeline.max_servers_per_tenant.
// It is the record's error, not the request's: the tenant's known servers
// still go through.
type ServerLimitError struct {
	Tenant, Server string
	Limit          int
}

func (e *ServerLimitError) Error() string {
	return fmt.Sprintf("server %.64q would be tenant %q's server number %d, past serve.pipeline.max_servers_per_tenant; "+
		"a server's partition is freed once it has been quiet and holds nothing (about the correlation window after its last call)",
		e.Server, e.Tenant, e.Limit+1)
}

// admission bounds the partitions of each tenant: every partition costs
// correlation state, status and metrics, and its key comes from the sender.
type admission struct {
	mu        sync.Mutex
	keys      map[detect.PartitionKey]time.Time // admitted, with the wall time of the last admission
	perTenant map[string]int
}

// Admit reports whether calls of server may be taken for tenant: the
// partition exists, or the tenant is under its cap of partitions. It
// returns a *ServerLimitError otherwise. Admitted partitions are counted
// until the engine removes them as idle.
func (p *Pipeline) Admit(tenant, server string) error {
	k := detect.PartitionKey{Tenant: tenant, Server: server}
	a := &p.admit
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.keys[k]; ok {
		a.keys[k] = p.now()
		return nil
	}
	if a.perTenant[tenant] >= p.cfg.MaxServersPerTenant {
		return &ServerLimitError{Tenant: tenant, Server: server, Limit: p.cfg.MaxServersPerTenant}
	}
	a.keys[k] = p.now()
	a.perTenant[tenant]++
	return nil
}

// seedAdmission admits the partitions rebuilt from the store.
func (p *Pipeline) seedAdmission() {
	a := &p.admit
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys = map[detect.PartitionKey]time.Time{}
	a.perTenant = map[string]int{}
	now := p.now()
	for _, k := range p.eng.Keys() {
		a.keys[k] = now
		a.perTenant[k.Tenant]++
	}
}

// expireIdle has the engine remove its idle, empty partitions and frees
// their admissions, and those of partitions admitted a while ago that never
// reached the engine (their ingest failed). Engine goroutine, after a
// successful commit.
func (p *Pipeline) expireIdle(now time.Time) {
	idle := max(p.dcfg.IdleTimeout, time.Minute)
	removed := p.eng.ExpireIdle(now, idle)
	p.free(removed)
	a := &p.admit
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, at := range a.keys {
		if now.Sub(at) < idle || p.eng.Has(k) {
			continue
		}
		delete(a.keys, k)
		if a.perTenant[k.Tenant]--; a.perTenant[k.Tenant] <= 0 {
			delete(a.perTenant, k.Tenant)
		}
	}
	if len(removed) > 0 {
		p.log.Debug("idle partitions removed", "partitions", len(removed), "left", p.eng.Partitions())
	}
}
