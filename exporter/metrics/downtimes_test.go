package metrics_test

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestDowntimes: the downtime before this start is exported with how the
// run before it ended, and the latest restart after each kind of end from
// the history the state file keeps, so that a crash followed by a clean
// restart still shows (t0 is 1795946400 in Unix seconds).
func TestDowntimes(t *testing.T) {
	head := func(name string) string {
		i := slices.IndexFunc(metrics.Families, func(f metrics.Family) bool { return f.Name == name })
		return "# HELP " + name + " " + metrics.Families[i].Help + "\n# TYPE " + name + " gauge\n"
	}
	watch := func(kept []audit.Downtime, lastKnown bool) *prometheus.Registry {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		if err := metrics.WatchDowntimes(reg, kept, lastKnown); err != nil {
			t.Fatal(err)
		}
		return reg
	}
	crash := audit.Downtime{From: t0.Add(time.Hour), To: t0.Add(time.Hour + 5*time.Second), End: audit.EndCrash}
	stop := audit.Downtime{From: t0.Add(2 * time.Hour), To: t0.Add(2*time.Hour + 1500*time.Millisecond), End: audit.EndStop}
	earlier := audit.Downtime{From: t0, To: t0.Add(2 * time.Second), End: audit.EndStop}

	t.Run("crash then clean restart", func(t *testing.T) {
		reg := watch([]audit.Downtime{earlier, crash, stop}, true)
		compare(t, reg, head(metrics.ServeLastDowntimeSeconds)+`mcpaudit_serve_last_downtime_seconds{end="stop"} 1.5
`+head(metrics.ServeRestartTimestampSeconds)+`mcpaudit_serve_restart_timestamp_seconds{end="crash"} 1795950005
mcpaudit_serve_restart_timestamp_seconds{end="stop"} 1795953601.5
`, metrics.ServeLastDowntimeSeconds, metrics.ServeRestartTimestampSeconds)
	})
	t.Run("after a crash", func(t *testing.T) {
		reg := watch([]audit.Downtime{earlier, crash}, true)
		compare(t, reg, head(metrics.ServeLastDowntimeSeconds)+`mcpaudit_serve_last_downtime_seconds{end="crash"} 5
`+head(metrics.ServeRestartTimestampSeconds)+`mcpaudit_serve_restart_timestamp_seconds{end="crash"} 1795950005
mcpaudit_serve_restart_timestamp_seconds{end="stop"} 1795946402
`, metrics.ServeLastDowntimeSeconds, metrics.ServeRestartTimestampSeconds)
	})
	// A start that could not tell how long serve was down adds no
	// downtime: the newest kept is an earlier start's.
	t.Run("this downtime unknown", func(t *testing.T) {
		reg := watch([]audit.Downtime{crash}, false)
		compare(t, reg, head(metrics.ServeRestartTimestampSeconds)+`mcpaudit_serve_restart_timestamp_seconds{end="crash"} 1795950005
`, metrics.ServeLastDowntimeSeconds, metrics.ServeRestartTimestampSeconds)
	})
	t.Run("no history", func(t *testing.T) {
		compare(t, watch(nil, true), "", metrics.ServeLastDowntimeSeconds, metrics.ServeRestartTimestampSeconds)
	})
	// The label stays bounded whatever the state file says.
	t.Run("unknown ends", func(t *testing.T) {
		odd := audit.Downtime{From: t0, To: t0.Add(time.Second), End: "oom"}
		none := audit.Downtime{From: t0.Add(time.Hour), To: t0.Add(time.Hour + 4*time.Second)}
		reg := watch([]audit.Downtime{odd, none}, true)
		compare(t, reg, head(metrics.ServeLastDowntimeSeconds)+`mcpaudit_serve_last_downtime_seconds{end="unknown"} 4
`+head(metrics.ServeRestartTimestampSeconds)+`mcpaudit_serve_restart_timestamp_seconds{end="unknown"} 1795950004
`, metrics.ServeLastDowntimeSeconds, metrics.ServeRestartTimestampSeconds)
	})
}
