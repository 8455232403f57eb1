package demo

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Fault is what the server does to one write.
type Fault string

// Faults. Every one leaves the write's outcome unknown to the client.
const (
	FaultNone Fault = ""
	// FaultTimeoutBefore holds the call for the injector's Hold, or until
	// the client gives up, then drops its answer on the wire, as a gateway
	// that times out does; it does not apply the write.
	FaultTimeoutBefore Fault = "timeout_before_apply"
	// FaultTimeoutAfter applies the write, then times out: Thegram holds
	// the call as FaultTimeoutBefore does and drops its answer; an
	// Oddlynew run ends as "Execution timed out" with the write succeeded
	// in its ledger.
	FaultTimeoutAfter Fault = "timeout_after_apply"
	// FaultLoseResponse applies the write and drops its response on the
	// wire (an aborted HTTP response; a stdio line never written).
	FaultLoseResponse Fault = "lose_response"
	// FaultUncertain applies the write and answers that its outcome is
	// uncertain: Thegram COMMIT_UNKNOWN, Oddlynew in_flight_unknown.
	FaultUncertain Fault = "uncertain"
)

// Faults lists the faults a random draw picks from.
var Faults = []Fault{FaultTimeoutBefore, FaultTimeoutAfter, FaultLoseResponse, FaultUncertain}

// Injected is one fault the server injected, for the journal.
type Injected struct {
	Time    time.Time
	Server  string
	Tool    string // gram_patch, documents.editDocument...
	Target  string // path or documentId
	Fault   Fault
	Applied bool
}

// Injector decides which writes get a fault. A plan (faults for the n-th
// write, in order) wins over the random rate. It is safe for concurrent use.
type Injector struct {
	mu      sync.Mutex
	rate    float64
	rng     *rand.Rand
	plan    []Fault
	journal []Injected
	// Hold is how long a timeout fault holds a call before the server
	// drops its answer. The server, not the client's patience, ends the
	// call, so a faulted call is lost and an ordinary one answered however
	// slow the machine is: a demo whose faults hung on the client's
	// timeout lost ordinary calls under load and did not show its fault
	// (dm22). Default 2s.
	Hold time.Duration
}

// NewInjector returns an injector that faults a fraction rate of writes,
// drawn from seed.
func NewInjector(rate float64, seed uint64) *Injector {
	return &Injector{rate: rate, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), Hold: 2 * time.Second}
}

// Plan queues faults for the next writes, in order; FaultNone lets one
// write through.
func (in *Injector) Plan(f ...Fault) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.plan = append(in.plan, f...)
}

// next draws the fault of the next write among allowed.
func (in *Injector) next(allowed []Fault) Fault {
	if in == nil {
		return FaultNone
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.plan) > 0 {
		f := in.plan[0]
		in.plan = in.plan[1:]
		return f
	}
	if in.rate <= 0 || in.rng.Float64() >= in.rate || len(allowed) == 0 {
		return FaultNone
	}
	return allowed[in.rng.IntN(len(allowed))]
}

func (in *Injector) record(i Injected) {
	if in == nil || i.Fault == FaultNone {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.journal = append(in.journal, i)
}

// Journal returns the faults injected so far.
func (in *Injector) Journal() []Injected {
	if in == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Injected(nil), in.journal...)
}

// hold waits until the hold time passes or the client gives up (ctx ends);
// the caller then drops the call's answer.
func (in *Injector) hold(ctx context.Context) {
	d := 2 * time.Second
	if in != nil && in.Hold > 0 {
		d = in.Hold
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// LoseMarker is the _meta key a tool result carries when its response must
// be lost on the wire; the transports of this package drop such responses.
const LoseMarker = "demo.mcpaudit/lose-response"

// coin draws whether an uncertain write was applied.
func (in *Injector) coin() bool {
	if in == nil {
		return true
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.plan) > 0 || in.rate <= 0 {
		return true
	}
	return in.rng.IntN(2) == 0
}
