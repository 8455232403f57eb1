package sqlite

import (
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

var writeDict = flag.String("write-dict", "", "build a compression dictionary from the storetest captures into this new file")

// TestWriteDictionary builds a dictionary the way dict_v2.bin was built. It
// never overwrites a file: a released dictionary is frozen, and a new one
// needs a new codec byte.
func TestWriteDictionary(t *testing.T) {
	if *writeDict == "" {
		t.Skip("set -write-dict=FILE to build a dictionary")
	}
	// Findings first, calls last: calls are the most frequent, and S2
	// references to the end of the dictionary are the shortest.
	var findings, calls []byte
	r := dialect.NewReader(dialect.Config{})
	cfg := detect.NewDefaultConfig()
	for _, name := range storetest.CaptureNames() {
		cs, err := storetest.Capture(name)
		if err != nil {
			t.Fatal(err)
		}
		var col storetest.Collector
		e := detect.NewEngine(cfg, &col)
		var last time.Time
		for _, c := range cs {
			rec := r.Read(c)
			calls = appendRecord(calls, rec)
			e.Add(name, rec, c.Time)
			last = c.Time
		}
		e.Tick(last.Add(cfg.VerifyWindow + cfg.IdleTimeout + time.Second))
		for _, f := range col.Results.Findings {
			body, err := json.Marshal(findingBody{Severity: f.Severity, Calls: f.Calls, Reason: f.Reason,
				RetryAction: f.RetryAction, Summary: f.Summary})
			if err != nil {
				t.Fatal(err)
			}
			findings = append(findings, body...)
		}
	}
	b := append(findings, calls...)
	if len(b) > 64<<10 {
		// S2 dictionaries hold at most 64 KiB; keep the end.
		b = b[len(b)-64<<10:]
	}
	f, err := os.OpenFile(*writeDict, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d bytes, sha256 %s", len(b), dictHash(b))
}

func TestDictionaryFrozen(t *testing.T) {
	if got := dictHash(dictV2); got != dictV2SHA256 {
		t.Fatalf("dict_v2.bin has sha256 %s, want %s: a released dictionary must never change (add a new codec instead)", got, dictV2SHA256)
	}
}
