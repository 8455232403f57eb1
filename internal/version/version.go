// Package version says which build of mcpaudit is running: the module
// version and the VCS commit, read from the binary's build information
// (debug.ReadBuildInfo), or from values set at link time.
//
// `go build` records the module version when the binary is built from a
// module at a tagged version (`go install module@v1.2.3`) and the commit when
// it is built in a Git checkout with VCS stamping on (the default; -buildvcs=false
// turns it off). A release build that has neither, such as a Docker build
// without the .git directory, sets them at link time:
//
//	go build -ldflags "-X github.com/mcpaudit/mcpaudit/internal/version.version=v1.2.3 \
//	  -X github.com/mcpaudit/mcpaudit/internal/version.revision=$(git rev-parse HEAD)" ./cmd/mcpaudit
//
// What is known from neither is "unknown"; an untagged build is "devel".
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time with -ldflags -X; they win over the build information.
var (
	version  string
	revision string
)

// Unknown stands for a value the build did not record.
const Unknown = "unknown"

// Info describes one build.
type Info struct {
	// Version is the module version (v1.2.3), "devel" for a build of an
	// untagged checkout, or the value set at link time.
	Version string
	// Revision is the VCS commit, with "-dirty" when the tree had local
	// changes, or "unknown".
	Revision string
	// Time is the commit time in RFC 3339, or empty.
	Time string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, version, revision)
}

// fromBuildInfo merges the build information and the link-time values;
// bi may be nil (a binary built without module support).
func fromBuildInfo(bi *debug.BuildInfo, ldVersion, ldRevision string) Info {
	in := Info{Version: Unknown, Revision: Unknown, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		switch v := bi.Main.Version; v {
		case "":
		case "(devel)":
			in.Version = "devel"
		default:
			in.Version = v
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.time":
				in.Time = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && in.Revision != Unknown {
			in.Revision += "-dirty"
		}
	}
	if ldVersion != "" {
		in.Version = ldVersion
	}
	if ldRevision != "" {
		in.Revision = ldRevision
	}
	return in
}

// String renders the build on one line: "v1.2.3 (commit 0123abcd, go1.26.8)".
func (in Info) String() string {
	var b strings.Builder
	b.WriteString(in.Version)
	b.WriteString(" (commit ")
	b.WriteString(in.Revision)
	if in.Time != "" {
		b.WriteString(", ")
		b.WriteString(in.Time)
	}
	b.WriteString(", ")
	b.WriteString(in.GoVersion)
	b.WriteString(")")
	return b.String()
}
