package report_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/report"
)

// pagedStore counts as report.Build did before the stores grouped the
// counts: every bad write read page by page with its call, and one
// WriteCounts a day.
type pagedStore struct{ audit.Store }

func (p pagedStore) BadWriteCounts(ctx context.Context, q audit.BadWriteQuery) (audit.BadWriteCounts, error) {
	return storetest.PagedBadWriteCounts(ctx, p.Store, q)
}

func (p pagedStore) WriteCountsByRange(ctx context.Context, q audit.CountQuery, bounds []time.Time) ([]map[audit.WriteState]int64, error) {
	return storetest.PagedWriteCountsByRange(ctx, p.Store, q, bounds)
}

// TestBuild_AsPaged: the report from the store's grouped counts is the
// report counted from every bad write and its call, byte for byte in each
// format, over many servers, tools, documents and clients whose counts tie
// at the cut of the top rows, writes without a document or a stored call,
// and calls without a client.
func TestBuild_AsPaged(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storetest.BadWriteMix(t, st)
	ctx := context.Background()
	t0 := storetest.T0
	day := 24 * time.Hour
	for _, tc := range []struct {
		name string
		q    report.Query
	}{
		{"30d", report.Query{Window: 30 * day, Until: t0.Add(4 * day)}},
		{"top 3", report.Query{Window: 30 * day, Until: t0.Add(4 * day), Top: 3}},
		{"top 1, a day and a half", report.Query{Window: 36 * time.Hour, Until: t0.Add(2*day + 7*time.Minute), Top: 1}},
		{"tenant", report.Query{Window: 30 * day, Until: t0.Add(5 * day), Tenant: "globex", Top: 4}},
		{"server", report.Query{Window: 30 * day, Until: t0.Add(5 * day), Server: "Zeta", Tenant: "acme", Top: 2}},
		{"no clients", report.Query{Window: 30 * day, Until: t0.Add(5 * day), SkipClients: true}},
		{"buckets of 2 days", report.Query{Window: 3650 * day, Until: t0.Add(200*day + time.Hour), Top: 5}},
		{"nothing", report.Query{Window: day, Until: t0.Add(-day)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.q.WindowName, tc.q.Target = tc.name, 0.99
			got, err := report.Build(ctx, st, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			want, err := report.Build(ctx, pagedStore{st}, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name != "nothing" && (want.BadEvents == 0 || len(want.ByClient) == 0 && !tc.q.SkipClients || len(want.Days) == 0) {
				t.Fatalf("the mix gives this report no bad write, client or day: %+v", want)
			}
			if tc.name == "buckets of 2 days" && want.BucketDays != 2 {
				t.Fatalf("bucket days %d, want 2", want.BucketDays)
			}
			got.Generated = want.Generated
			for _, format := range report.Formats {
				var g, w bytes.Buffer
				if err := report.Render(&g, got, format); err != nil {
					t.Fatal(err)
				}
				report.Render(&w, want, format)
				if !bytes.Equal(g.Bytes(), w.Bytes()) {
					t.Errorf("%s from grouped counts:\n%s\nwant, as counted from every bad write:\n%s", format, g.String(), w.String())
				}
			}
		})
	}
}
