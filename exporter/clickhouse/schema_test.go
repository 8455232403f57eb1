package clickhouse

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenRetention is the retention policy of the golden DDL: a default and
// two tenants, one shorter and one longer.
var goldenRetention = Retention{
	Default: 90 * 24 * time.Hour,
	Tenants: map[string]time.Duration{"acme": 7 * 24 * time.Hour, "o'brien": 365 * 24 * time.Hour},
}

// TestSchemaGolden renders the whole DDL for a current server with every
// optional feature, the same in cluster mode, and for 18.16; a reviewer reads
// the diff of testdata/ after -update.
func TestSchemaGolden(t *testing.T) {
	current := capabilitiesOf(version{25, 8, 1})
	old := capabilitiesOf(version{18, 16, 1})
	for _, tc := range []struct {
		file string
		l    layout
	}{
		{"schema-25.8.sql", layout{DB: "mcpaudit", Caps: current}},
		{"schema-25.8-cluster.sql", layout{DB: "mcpaudit", Cluster: "audit", Caps: current}},
		{"schema-18.16.sql", layout{DB: "mcpaudit", Caps: old}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			got, err := tc.l.ddl(goldenRetention)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./exporter/clickhouse -run TestSchemaGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("the DDL differs from %s; run go test ./exporter/clickhouse -run TestSchemaGolden -update and read the diff\n%s", path, firstDiff(string(want), got))
			}
		})
	}
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n-" + w + "\n+" + g
		}
	}
	return ""
}

func TestCapabilities(t *testing.T) {
	f := func(v version, ttl, token, lcExperimental bool) {
		t.Helper()
		c := capabilitiesOf(v)
		if c.TTL != ttl || c.DedupToken != token || c.LowCardinalityExperimental != lcExperimental {
			t.Errorf("%s: TTL %v token %v lc-experimental %v, want %v %v %v", v, c.TTL, c.DedupToken, c.LowCardinalityExperimental, ttl, token, lcExperimental)
		}
		if got := len(c.fallbacks()) == 0; got != (ttl && token) {
			t.Errorf("%s: fallbacks %v", v, c.fallbacks())
		}
	}
	f(version{18, 16, 1}, false, false, true)
	f(version{19, 1, 0}, false, false, false)
	f(version{21, 8, 0}, true, false, false)
	f(version{22, 3, 0}, true, true, false)
	f(version{25, 8, 1}, true, true, false)
	f(version{26, 1, 0}, true, true, false)
}

func TestTTLExpr(t *testing.T) {
	f := func(r Retention, want string) {
		t.Helper()
		if got := ttlExpr(r); got != want {
			t.Errorf("ttlExpr(%+v)\n got %s\nwant %s", r, got, want)
		}
	}
	day := 24 * time.Hour
	f(Retention{}, "")
	f(Retention{Default: 30 * day}, "time + INTERVAL 2592000 SECOND")
	f(Retention{Default: 1500 * time.Millisecond}, "time + INTERVAL 2 SECOND")
	f(Retention{Tenants: map[string]time.Duration{"a": day}}, "multiIf(tenant = 'a', time + INTERVAL 86400 SECOND, toDateTime(4294967295))")
	f(Retention{Default: day, Tenants: map[string]time.Duration{"b": 2 * day, "a": day}},
		"multiIf(tenant = 'a', time + INTERVAL 86400 SECOND, tenant = 'b', time + INTERVAL 172800 SECOND, time + INTERVAL 86400 SECOND)")
}

func TestQuote(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
	f("", "''")
	f("acme", "'acme'")
	f("o'brien", `'o\'brien'`)
	f(`a\b`, `'a\\b'`)
	f("nul\x00", `'nul\0'`)
	f("line\nbreak", "'line\nbreak'")
}
