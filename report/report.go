package report

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// Query selects what a report covers.
type Query struct {
	// Window is how far back from Until the report reaches.
	Window time.Duration
	// WindowName is how the window was asked for ("30d"); it is printed.
	WindowName string
	// Until ends the window. Zero means now.
	Until  time.Time
	Tenant string
	Server string
	// Target is the write-durability objective, in (0, 1]. At 1 (100 %)
	// there is no error budget: it is all left while no write is bad, and
	// overspent (null in JSON, n/a on the page) at the first bad one.
	Target float64
	// Top is how many rows the breakdowns keep. Default 10.
	Top int
	// SkipClients leaves ByClient empty instead of counting the bad
	// writes by the client of their calls (the embedded store reads the
	// call of each).
	SkipClients bool
	// SkipFailures leaves RetryMix empty instead of counting the failed
	// calls of the window (the embedded store reads every call for it).
	SkipFailures bool
}

// Row is one line of a breakdown.
type Row struct {
	Name string `json:"name"`
	// Server is, in ByDocument, the server that holds the document: a
	// document is a server's, and two servers' documents of one path are
	// two rows (op23's D2). Empty elsewhere.
	Server string `json:"server,omitempty"`
	Count  int64  `json:"count"`
}

// Day is one bucket of the window (a day, or several when the window is
// long).
type Day struct {
	Start  time.Time                  `json:"start"`
	End    time.Time                  `json:"end"`
	Counts map[audit.WriteState]int64 `json:"counts"`
	Bad    int64                      `json:"bad"`
	SLI    *float64                   `json:"sli"`
}

// Point is one point of the error-budget burn-down.
type Point struct {
	Time time.Time `json:"time"`
	// BudgetRemaining is the share of the window's error budget not spent
	// by the bad events up to Time.
	BudgetRemaining float64 `json:"budget_remaining"`
}

// KindRow is the findings of one kind by lifecycle state.
type KindRow struct {
	Kind         audit.Kind     `json:"kind"`
	Severity     audit.Severity `json:"severity"`
	Open         int64          `json:"open"`
	Acknowledged int64          `json:"acknowledged"`
	Resolved     int64          `json:"resolved"`
	Total        int64          `json:"total"`
}

// Report is the write-durability report of one window.
type Report struct {
	Window string    `json:"window"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	Tenant string    `json:"tenant,omitempty"`
	Server string    `json:"server,omitempty"`
	Target float64   `json:"target"`
	// Counts are the writes of the window by current state, as
	// /api/v1/slo counts them.
	Counts map[audit.WriteState]int64 `json:"counts"`
	// SLI is null when no write counts toward it.
	SLI                  *float64 `json:"sli"`
	ErrorBudgetRemaining *float64 `json:"error_budget_remaining"`
	// ErrorBudgetSpent is 1 - ErrorBudgetRemaining: how many times the
	// budget was spent.
	ErrorBudgetSpent *float64 `json:"error_budget_spent"`
	// ErrorBudgetLeft says ErrorBudgetRemaining as /api/v1/slo's
	// error_budget_left does (api.BudgetLeft). Empty when it is null.
	ErrorBudgetLeft string `json:"error_budget_left,omitempty"`
	// BadEvents are the unverified and double-applied writes.
	BadEvents int64 `json:"bad_events"`
	ByCause   []Row `json:"by_cause"`
	ByServer  []Row `json:"by_server"`
	ByTool    []Row `json:"by_tool"`
	ByClient  []Row `json:"by_client"`
	// ByDocument are the documents with the most bad events, each with
	// its server.
	ByDocument []Row `json:"by_document"`
	// Findings are the findings of the window by kind and state; their
	// Total equals /api/v1/findings over the window.
	Findings      []KindRow `json:"findings"`
	FindingsTotal int64     `json:"findings_total"`
	// RetryMix counts the failed calls of the window by retry action.
	RetryMix  []Row   `json:"retry_mix"`
	Failures  int64   `json:"failures"`
	Days      []Day   `json:"days"`
	WorstDays []Day   `json:"worst_days"`
	BurnDown  []Point `json:"burn_down"`
	// BucketDays is how many days one entry of Days spans.
	BucketDays int       `json:"bucket_days"`
	Generated  time.Time `json:"generated"`
	// Stored, when the window holds no write, is where the stored writes
	// of its tenant and server lie, with the --until and --window that
	// cover them; absent when the window holds a write or none is stored.
	Stored *Stored `json:"stored_writes,omitempty"`
}

// cause names the bad events of a state and reason: double_applied, or
// unverified with its reason.
func cause(state audit.WriteState, reason audit.Reason) string {
	if state == audit.StateDoubleApplied {
		return string(audit.StateDoubleApplied)
	}
	if reason == "" {
		return "unverified"
	}
	return "unverified: " + string(reason)
}

// Formula says how the SLI is computed (findings.md §2), for every output
// that prints an SLI: the page, the report in each format and mcpaudit slo.
const Formula = "SLI = (durable + resolved) / (durable + resolved + unverified + double_applied); rejected and pending writes are outside it."

// Bad returns the writes that spend the error budget.
func Bad(counts map[audit.WriteState]int64) int64 {
	return counts[audit.StateUnverified] + counts[audit.StateDoubleApplied]
}

// Counted returns the writes the SLI counts.
func Counted(counts map[audit.WriteState]int64) int64 {
	return counts[audit.StateDurable] + counts[audit.StateResolved] + Bad(counts)
}

// Build computes the report of q from store.
func Build(ctx context.Context, store audit.Store, q Query) (*Report, error) {
	if q.Until.IsZero() {
		q.Until = time.Now()
	}
	if q.Top <= 0 {
		q.Top = 10
	}
	if q.Window <= 0 {
		return nil, fmt.Errorf("cannot build report: window must be positive")
	}
	if !(q.Target > 0 && q.Target <= 1) {
		return nil, fmt.Errorf("cannot build report: target %v is not in (0, 1]", q.Target)
	}
	r := &Report{Window: q.WindowName, Until: q.Until.UTC(), Since: q.Until.Add(-q.Window).UTC(),
		Tenant: q.Tenant, Server: q.Server, Target: q.Target, Generated: time.Now().UTC()}
	cq := audit.CountQuery{Server: q.Server, Tenant: q.Tenant, Since: r.Since, Until: r.Until}
	counts, err := store.WriteCounts(ctx, cq)
	if err != nil {
		return nil, fmt.Errorf("cannot count writes: %w", err)
	}
	r.Counts = full(counts)
	if api.NoWrite(counts) {
		if r.Stored, err = storedWrites(ctx, store, q); err != nil {
			return nil, err
		}
	}
	r.SLI, r.ErrorBudgetRemaining = api.ComputeSLO(counts, q.Target)
	if r.ErrorBudgetRemaining != nil {
		if math.IsInf(*r.ErrorBudgetRemaining, 0) {
			r.ErrorBudgetRemaining = nil
		} else {
			spent := 1 - *r.ErrorBudgetRemaining
			r.ErrorBudgetSpent = &spent
			r.ErrorBudgetLeft = BudgetLeft(*r.ErrorBudgetRemaining, q.Target)
		}
	}
	r.BadEvents = Bad(counts)
	if err := r.breakdowns(ctx, store, q); err != nil {
		return nil, err
	}
	fc, err := store.FindingCounts(ctx, audit.FindingQuery{Tenant: q.Tenant, Server: q.Server, Since: r.Since, Until: r.Until})
	if err != nil {
		return nil, fmt.Errorf("cannot count findings: %w", err)
	}
	r.Findings, r.FindingsTotal = kindRows(fc)
	mix := map[audit.RetryAction]int64{}
	if !q.SkipFailures {
		if mix, err = store.FailureCounts(ctx, cq); err != nil {
			return nil, fmt.Errorf("cannot count failures: %w", err)
		}
	}
	for a, n := range mix {
		r.RetryMix = append(r.RetryMix, Row{Name: string(a), Count: n})
		r.Failures += n
	}
	sortRows(r.RetryMix)
	if err := r.days(ctx, store, q); err != nil {
		return nil, err
	}
	return r, nil
}

func full(counts map[audit.WriteState]int64) map[audit.WriteState]int64 {
	out := map[audit.WriteState]int64{}
	for _, st := range audit.WriteStates {
		out[st] = counts[st]
	}
	return out
}

// breakdowns counts the bad writes of the window by cause, server, tool,
// document and client, grouped by the store.
func (r *Report) breakdowns(ctx context.Context, store audit.Store, q Query) error {
	bc, err := store.BadWriteCounts(ctx, audit.BadWriteQuery{
		CountQuery: audit.CountQuery{Server: q.Server, Tenant: q.Tenant, Since: r.Since, Until: r.Until},
		Top:        q.Top, Clients: !q.SkipClients})
	if err != nil {
		return fmt.Errorf("cannot count bad writes: %w", err)
	}
	causes := map[string]int64{}
	for _, c := range bc.Causes {
		causes[cause(c.State, c.Reason)] += c.Count
	}
	r.ByCause = top(causes, 0)
	r.ByServer = top(byName(bc.Servers), q.Top)
	r.ByTool = top(byName(bc.Tools), q.Top)
	r.ByDocument = make([]Row, 0, len(bc.Documents))
	for _, d := range bc.Documents {
		r.ByDocument = append(r.ByDocument, Row{Name: d.Name, Server: d.Server, Count: d.Count})
	}
	sortRows(r.ByDocument)
	if len(r.ByDocument) > q.Top {
		r.ByDocument = r.ByDocument[:q.Top]
	}
	r.ByClient = top(byName(bc.Clients), q.Top)
	return nil
}

func byName(ns []audit.NameCount) map[string]int64 {
	m := make(map[string]int64, len(ns))
	for _, n := range ns {
		m[n.Name] += n.Count
	}
	return m
}

func top(m map[string]int64, n int) []Row {
	rows := make([]Row, 0, len(m))
	for k, v := range m {
		rows = append(rows, Row{Name: k, Count: v})
	}
	sortRows(rows)
	if n > 0 && len(rows) > n {
		rows = rows[:n]
	}
	return rows
}

func sortRows(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Server, b.Server))
	})
}

func kindRows(fc []audit.FindingCount) ([]KindRow, int64) {
	byKind := map[audit.Kind]*KindRow{}
	var total int64
	for _, c := range fc {
		if c.State == audit.FindingWithdrawn {
			continue // taken back by the collector: analyze has none
		}
		k := byKind[c.Kind]
		if k == nil {
			k = &KindRow{Kind: c.Kind, Severity: c.Kind.Severity()}
			byKind[c.Kind] = k
		}
		switch c.State {
		case audit.FindingAcknowledged:
			k.Acknowledged += c.Count
		case audit.FindingResolved:
			k.Resolved += c.Count
		default:
			k.Open += c.Count
		}
		k.Total += c.Count
		total += c.Count
	}
	var out []KindRow
	for _, k := range audit.Kinds {
		if r := byKind[k]; r != nil {
			out = append(out, *r)
		}
	}
	return out, total
}

// maxBuckets bounds the entries of Days: a longer window gets buckets of
// several days.
const maxBuckets = 120

// days counts the writes of each day from the first write of the window,
// and draws the burn-down from them.
func (r *Report) days(ctx context.Context, store audit.Store, q Query) error {
	first, err := store.Writes(ctx, audit.WriteQuery{Server: q.Server, Tenant: q.Tenant, Since: r.Since, Until: r.Until, Limit: 1})
	if err != nil {
		return fmt.Errorf("cannot read the first write: %w", err)
	}
	r.BucketDays = 1
	if len(first.Writes) == 0 {
		return nil
	}
	const day = 24 * time.Hour
	start := first.Writes[0].Time.UTC().Truncate(day)
	if start.Before(r.Since) {
		start = r.Since
	}
	span := r.Until.Sub(start)
	n := int((span + day - 1) / day)
	if n > maxBuckets {
		r.BucketDays = (n + maxBuckets - 1) / maxBuckets
	}
	step := time.Duration(r.BucketDays) * day
	bounds := []time.Time{start}
	for t := start; t.Before(r.Until); {
		end := t.UTC().Truncate(day).Add(step)
		if end.After(r.Until) {
			end = r.Until
		}
		bounds = append(bounds, end)
		t = end
	}
	cs, err := store.WriteCountsByRange(ctx, audit.CountQuery{Server: q.Server, Tenant: q.Tenant}, bounds)
	if err != nil {
		return fmt.Errorf("cannot count the writes of each day: %w", err)
	}
	if len(cs) != len(bounds)-1 {
		return fmt.Errorf("cannot count the writes of each day: %d counts for %d days", len(cs), len(bounds)-1)
	}
	total := Counted(r.Counts)
	var badCum int64
	budget := (1 - q.Target) * float64(total)
	for i, c := range cs {
		d := Day{Start: bounds[i], End: bounds[i+1], Counts: full(c), Bad: Bad(c)}
		d.SLI, _ = api.ComputeSLO(c, q.Target)
		r.Days = append(r.Days, d)
		badCum += d.Bad
		if budget > 0 {
			r.BurnDown = append(r.BurnDown, Point{Time: d.End, BudgetRemaining: 1 - float64(badCum)/budget})
		}
	}
	worst := slices.Clone(r.Days)
	worst = slices.DeleteFunc(worst, func(d Day) bool { return d.Bad == 0 })
	slices.SortStableFunc(worst, func(a, b Day) int {
		return cmp.Or(cmp.Compare(*a.SLI, *b.SLI), cmp.Compare(b.Bad, a.Bad))
	})
	if len(worst) > 5 {
		worst = worst[:5]
	}
	r.WorstDays = worst
	return nil
}
