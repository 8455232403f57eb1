package detect_test

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

var update = flag.Bool("update", false, "rewrite the golden findings under testdata/golden")

// sink collects everything the detector reports.
type sink struct {
	findings []audit.Finding
	writes   map[string]audit.WriteState
	calls    []*audit.Record
}

func newSink() *sink { return &sink{writes: map[string]audit.WriteState{}} }

func (s *sink) Call(r *audit.Record) { s.calls = append(s.calls, r) }
func (s *sink) Write(w *audit.Write, _ audit.WriteState) {
	s.writes[w.CallID+"/"+w.Tool] = w.State
}
func (s *sink) Finding(f *audit.Finding) { s.findings = append(s.findings, *f) }

func (s *sink) states() map[audit.WriteState]int {
	m := map[audit.WriteState]int{}
	for _, st := range s.writes {
		m[st]++
	}
	return m
}

// analyzeFile runs the detector over one capture file, as analyze does.
func analyzeFile(t *testing.T, path string) *sink {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec, err := capture.NewDecoder(f, path)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	d := newRunner(detect.NewDefaultConfig(), s)
	for {
		r, err := dec.NextRecord(d.r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		d.AddRecord(r)
	}
	d.Flush()
	return s
}

type expected struct {
	Kind     audit.Kind `json:"kind"`
	Server   string     `json:"server"`
	Document string     `json:"document"`
	Key      string     `json:"key"`
}

// matches applies the rule of the examples' README: kind and server equal,
// and document or key equal to the entry's.
func matches(f audit.Finding, e expected) bool {
	if f.Kind != e.Kind || f.Server != e.Server {
		return false
	}
	return e.Document != "" && f.Document == e.Document || e.Key != "" && f.Key == e.Key
}

// TestExamples checks every example capture, in both carriers, against its
// expected findings: each expected entry matched by exactly one finding and
// no finding left over.
func TestExamples(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/examples/*.expected.json")
	if len(files) == 0 {
		t.Fatal("no examples under testdata/examples")
	}
	for _, exp := range files {
		name := strings.TrimSuffix(filepath.Base(exp), ".expected.json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(exp)
			if err != nil {
				t.Fatal(err)
			}
			var want []expected
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			var byCarrier [2][]audit.Finding
			for i, ext := range []string{".ndjson", ".otlp.json"} {
				got := analyzeFile(t, strings.TrimSuffix(exp, ".expected.json")+ext).findings
				byCarrier[i] = got
				used := make([]bool, len(got))
				for _, e := range want {
					n := 0
					for j, f := range got {
						if matches(f, e) {
							n++
							used[j] = true
						}
					}
					if n != 1 {
						t.Errorf("%s: expected %+v matched by %d findings, want 1", ext, e, n)
					}
				}
				for j, f := range got {
					if !used[j] {
						t.Errorf("%s: unexpected finding %s on %s/%s: %s", ext, f.Kind, f.Document, f.Key, f.Summary)
					}
					if f.Summary == "" || len(f.Calls) == 0 || f.Severity != f.Kind.Severity() || f.Time.IsZero() {
						t.Errorf("%s: incomplete finding %+v", ext, f)
					}
				}
			}
			if !reflect.DeepEqual(byCarrier[0], byCarrier[1]) {
				t.Errorf("call records and OTLP disagree:\n%+v\n%+v", byCarrier[0], byCarrier[1])
			}
			golden(t, name, byCarrier[0])
		})
	}
}

// golden compares the full findings with testdata/golden/NAME.json, so that
// a change of evidence, summary or retry action shows in review.
func golden(t *testing.T, name string, fs []audit.Finding) {
	t.Helper()
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Time.Before(fs[j].Time) })
	got, _ := json.MarshalIndent(fs, "", "  ")
	path := filepath.Join("testdata", "golden", name+".json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if strings.TrimSpace(string(want)) != strings.TrimSpace(string(got)) {
		t.Errorf("findings differ from %s (run go test -update and review the diff):\n%s", path, got)
	}
}
