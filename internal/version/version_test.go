package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	f := func(name string, bi *debug.BuildInfo, ldVersion, ldRevision string, want Info) {
		t.Helper()
		got := fromBuildInfo(bi, ldVersion, ldRevision)
		if got != want {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
	settings := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	f("no build info", nil, "", "", Info{Version: Unknown, Revision: Unknown, GoVersion: Get().GoVersion})
	f("go install of a tag",
		&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
		"", "", Info{Version: "v1.2.3", Revision: Unknown, GoVersion: "go1.26.8"})
	f("checkout with vcs stamping",
		&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "0123abcd", "vcs.time", "2026-11-30T10:00:00Z", "vcs.modified", "false")},
		"", "", Info{Version: "devel", Revision: "0123abcd", Time: "2026-11-30T10:00:00Z", GoVersion: "go1.26.8"})
	f("dirty tree",
		&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "0123abcd", "vcs.modified", "true")},
		"", "", Info{Version: "devel", Revision: "0123abcd-dirty", GoVersion: "go1.26.8"})
	f("-buildvcs=false with link-time values",
		&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
		"v1.3.0", "fedcba98", Info{Version: "v1.3.0", Revision: "fedcba98", GoVersion: "go1.26.8"})
	f("link-time values win over vcs stamping",
		&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
			Settings: settings("vcs.revision", "0123abcd")},
		"v1.2.4", "", Info{Version: "v1.2.4", Revision: "0123abcd", GoVersion: "go1.26.8"})
}

func TestString(t *testing.T) {
	in := Info{Version: "v1.2.3", Revision: "0123abcd", Time: "2026-11-30T10:00:00Z", GoVersion: "go1.26.8"}
	if got, want := in.String(), "v1.2.3 (commit 0123abcd, 2026-11-30T10:00:00Z, go1.26.8)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
