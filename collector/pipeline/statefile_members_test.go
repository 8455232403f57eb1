package pipeline

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestDecodeMarks_EveryMember: every member of a state file is read back
// as it was written, whatever its name: a member added to markFile is
// decoded by its json tag alone. Before op47 decodeMarks mapped each key
// to its field by hand, and a member added to markFile but not there was
// passed over as "a member of a later release", which no test noticed.
// The file written has every member set (checked by reflection): a new
// member must be set here too.
func TestDecodeMarks_EveryMember(t *testing.T) {
	at := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	want := markFile{
		Version:     stateVersion,
		Store:       "sqlite",
		Floor:       at.Add(-time.Hour),
		Saved:       at,
		Freed:       []freedLine{{Tenant: "acme", Server: "thegram", Watermark: at.Add(-time.Minute)}},
		Run:         runRunning,
		Downtimes:   []audit.Downtime{{From: at.Add(-2 * time.Hour), To: at.Add(-time.Hour), End: audit.EndCrash}},
		Withdrawals: []audit.FindingChange{{FindingID: "f1", Tenant: "acme", State: "withdrawn", By: "mcpaudit", Time: at}},
		Counters:    json.RawMessage(`{"servers":[{"server":"thegram","findings":{"wasted_retry/info":3}}]}`),
		CountersLog: &countsRef{File: "partitions.counts.b", ID: "5eed", Seq: 42},
		Partitions:  []markLine{{Tenant: "acme", Server: "thegram", mark: mark{Watermark: at}}},
	}
	v := reflect.ValueOf(want)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("markFile.%s is not set in the file this test writes: set it", v.Type().Field(i).Name)
		}
	}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, good, err := decodeMarks(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(good) != v.NumField() {
		t.Errorf("read whole %v, want all %d members", good, v.NumField())
	}
	g := reflect.ValueOf(got)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		wj, _ := json.Marshal(v.Field(i).Interface())
		gj, _ := json.Marshal(g.Field(i).Interface())
		if string(wj) != string(gj) {
			t.Errorf("markFile.%s read back as %s, written %s", name, gj, wj)
		}
	}
}
