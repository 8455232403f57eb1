package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors of the finding lifecycle.
var (
	// ErrNotFound is returned when no finding (or call) with the given id is
	// stored for the caller's tenant.
	ErrNotFound = errors.New("not found")
	// ErrStateConflict is returned when a state change is not allowed from
	// the finding's current state (acknowledging a resolved finding).
	ErrStateConflict = errors.New("state change not allowed")
)

// FindingState is where a finding stands in its lifecycle: open until a
// person acknowledges or resolves it, or until the collector withdraws it.
type FindingState string

// Finding states.
const (
	FindingOpen         FindingState = "open"
	FindingAcknowledged FindingState = "acknowledged"
	FindingResolved     FindingState = "resolved"
	// FindingWithdrawn is set by the collector alone (by "mcpaudit"), never
	// by a person: a call judged late showed the finding wrong, and judging
	// in time order (analyze) makes none (docs/detection.md, "A late call of
	// a write whose window already closed"). A withdrawn finding is left out
	// of every list and count unless asked for by state or id, and no
	// person may change it again.
	FindingWithdrawn FindingState = "withdrawn"
)

// FindingStates lists the lifecycle states in order.
var FindingStates = []FindingState{FindingOpen, FindingAcknowledged, FindingResolved, FindingWithdrawn}

// Valid reports whether s is one of FindingStates.
func (s FindingState) Valid() bool {
	return s == FindingOpen || s == FindingAcknowledged || s == FindingResolved || s == FindingWithdrawn
}

// CheckTransition returns an error wrapping ErrStateConflict when a finding
// in state from may not move to state to. A resolved finding can only be
// reopened; anything else may be acknowledged (again, with a new note),
// resolved or reopened. A withdrawn finding can move nowhere; any other may
// be withdrawn, one a person acknowledged or resolved too: the finding is
// wrong whatever a person made of it, and its history keeps their change.
func CheckTransition(from, to FindingState) error {
	if from == "" {
		from = FindingOpen
	}
	if !to.Valid() {
		return fmt.Errorf("unknown finding state %q: %w", to, ErrStateConflict)
	}
	if from == FindingWithdrawn {
		return fmt.Errorf("finding was withdrawn by mcpaudit: %w", ErrStateConflict)
	}
	if to == FindingWithdrawn {
		return nil
	}
	if from == FindingResolved && to != FindingOpen {
		return fmt.Errorf("finding is already resolved (reopen it first): %w", ErrStateConflict)
	}
	return nil
}

// FindingStatus is a finding's current lifecycle state and the change that
// put it there. Stores return nil for a finding nobody changed: it is open.
type FindingStatus struct {
	State FindingState `json:"state"`
	// By names the credential that made the change.
	By   string    `json:"by,omitempty"`
	At   time.Time `json:"at,omitzero"`
	Note string    `json:"note,omitempty"`
}

// StateOf returns the lifecycle state of f: open when nobody changed it.
func (f *Finding) StateOf() FindingState {
	if f.Status == nil || f.Status.State == "" {
		return FindingOpen
	}
	return f.Status.State
}

// FindingChange is one stored change of a finding's state: the audit trail
// of who acknowledged, resolved or reopened it, when, and why.
type FindingChange struct {
	FindingID string       `json:"finding_id"`
	Tenant    string       `json:"tenant"`
	State     FindingState `json:"state"`
	By        string       `json:"by"`
	Note      string       `json:"note,omitempty"`
	Time      time.Time    `json:"time"`
}

// FindingCount is how many findings of one kind are in one lifecycle state.
type FindingCount struct {
	Kind  Kind         `json:"kind"`
	State FindingState `json:"state"`
	Count int64        `json:"count"`
}

// CallQuery selects stored calls. At most one of IDs, Document and Session
// is usually set; zero fields do not filter.
type CallQuery struct {
	Tenant   string
	Server   string
	IDs      []string // these calls only
	Document string   // calls that touched this document
	Session  string   // calls of this session
	// Source keeps the calls that came on this sender, named as status
	// and held_by name it ("otlp:thegram/pod-b/node-2"): compared with
	// Call.Source, so calls stored before senders were recorded (which
	// name their place in the request) are not found by it.
	Source string
	Since  time.Time
	Until  time.Time
	Limit  int    // at most this many; the store applies a default and a cap
	Cursor string // from a previous page
}

// CallPage is one page of calls in time order. Calls of one instant come
// in an order the store keeps from page to page: ID order (ClickHouse), or
// the order they were stored in (the embedded store); with IDs, ID order.
type CallPage struct {
	Calls      []Record
	NextCursor string
}

// Investigator is the part of a Store that the investigation page, the
// finding lifecycle and the report read and write. Its methods are safe
// for concurrent use and return ErrUnavailable (wrapped) when the backend
// cannot be reached.
type Investigator interface {
	// ChangeFinding records a state change of the finding c.FindingID,
	// checked against its current state with CheckTransition, and returns
	// the new status. A finding not stored for c.Tenant (any tenant when
	// c.Tenant is empty) gives ErrNotFound.
	ChangeFinding(ctx context.Context, c FindingChange) (FindingStatus, error)
	// FindingHistory returns every state change of a finding, oldest first.
	FindingHistory(ctx context.Context, id, tenant string) ([]FindingChange, error)
	// FindingCounts counts the findings that q selects (its Limit, Cursor
	// and Newest ignored) by kind and lifecycle state.
	FindingCounts(ctx context.Context, q FindingQuery) ([]FindingCount, error)
	// Calls returns one page of stored calls with their payloads. The
	// first page (no Cursor) sees every call acknowledged before it was
	// asked for; a later page reads on from its cursor without waiting
	// again for the calls acknowledged since, which may fall either side
	// of it.
	Calls(ctx context.Context, q CallQuery) (CallPage, error)
	// FailureCounts counts the stored calls whose Time is in [Since,
	// Until) and that failed, by the retry action of their failure.
	FailureCounts(ctx context.Context, q CountQuery) (map[RetryAction]int64, error)
}

// findingJSON has Finding's fields and none of its methods.
type findingJSON Finding

// MarshalJSON prints a finding as findings.md §5 with its stable id first.
func (f Finding) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID string `json:"id"`
		findingJSON
	}{f.ID(), findingJSON(f)})
}

// SortFindingCounts orders counts as Kinds, then as FindingStates, so
// that every store answers in one order.
func SortFindingCounts(cs []FindingCount) {
	rank := func(c FindingCount) int {
		k := slices.Index(Kinds, c.Kind)
		if k < 0 {
			k = len(Kinds)
		}
		return k*len(FindingStates) + slices.Index(FindingStates, c.State)
	}
	slices.SortStableFunc(cs, func(a, b FindingCount) int { return rank(a) - rank(b) })
}
