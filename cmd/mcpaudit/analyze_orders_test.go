package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAnalyze_ExampleOrders (fx19d): analyze of every example capture
// with its scenario's calls permuted (reversed, each call moved after the
// others, each pair swapped; the closing tail call last) gives the
// findings of the file in order. The permuted calls are judged late,
// within allowed_lateness (raised for a scenario whose calls lie further
// apart than the default 2 m). Found from outside by live19 in serve: a
// blocked copy plan after its replay made no wasted_retry, a
// request_id_reuse after the key's first use named one call; and here: a
// copy receipt after the apply that re-sent it too early made no
// premature_retry.
func TestAnalyze_ExampleOrders(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.ndjson")
	if len(files) == 0 {
		t.Fatal("no examples under testdata/examples")
	}
	dir := t.TempDir()
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".ndjson")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var scen, tail [][]byte
			var first, last time.Time
			for _, l := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
				if bytes.Contains(l, []byte(`"session":"s-tail"`)) {
					tail = append(tail, l)
					continue
				}
				scen = append(scen, l)
				var rec struct{ Time time.Time }
				if err := json.Unmarshal(l, &rec); err != nil {
					t.Fatal(err)
				}
				if first.IsZero() {
					first = rec.Time
				}
				last = rec.Time
			}
			allowed := max(2*time.Minute, last.Sub(first)+2*time.Minute)
			cfg := filepath.Join(dir, name+".yaml")
			if err := os.WriteFile(cfg, fmt.Appendf(nil, "detect:\n  allowed_lateness: %s\n", allowed), 0o644); err != nil {
				t.Fatal(err)
			}
			in := filepath.Join(dir, name+".ndjson")
			writeLines(t, in, append(slices.Clone(scen), tail...))
			want := analyzeJSON(t, "--config", cfg, in)
			for _, order := range exampleOrders(len(scen)) {
				perm := filepath.Join(dir, name+".perm.ndjson")
				var lines [][]byte
				for _, i := range order {
					lines = append(lines, scen[i])
				}
				writeLines(t, perm, append(lines, tail...))
				if got := analyzeJSON(t, "--config", cfg, perm); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("order %v:\n%s\nwant (in order)\n%s", order, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}
}

// exampleOrders returns orders of n calls other than in order: reversed,
// each call moved after the others, each pair swapped (as
// collector/pipeline's TestLateOrders_Examples delivers them).
func exampleOrders(n int) [][]int {
	in := make([]int, n)
	for i := range in {
		in[i] = i
	}
	var out [][]int
	add := func(o []int) {
		if !slices.Equal(o, in) && !slices.ContainsFunc(out, func(p []int) bool { return slices.Equal(p, o) }) {
			out = append(out, o)
		}
	}
	rev := slices.Clone(in)
	slices.Reverse(rev)
	add(rev)
	for i := range n {
		add(append(slices.Delete(slices.Clone(in), i, i+1), i))
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			o := slices.Clone(in)
			o[i], o[j] = o[j], o[i]
			add(o)
		}
	}
	return out
}
