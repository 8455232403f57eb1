package pipeline

import (
	"log/slog"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/ratelog"
)

// FindingLogBurst is how many finding lines FindingLog writes a minute;
// past it the lines are counted and the count is written with the next
// line (ratelog), so a burst of findings cannot flood the log.
const FindingLogBurst = 120

// FindingLog is a sink that writes one line for every new finding: its id,
// kind, severity, tenant, server, retry action and time, and how many calls
// are its evidence. It writes no document, session or summary: those can
// hold what a tenant keeps private, and the id opens them in the API and on
// the page. Findings the gate holds back after a restart (made before it)
// never reach it.
type FindingLog struct {
	log *ratelog.Logger
}

// NewFindingLog returns a FindingLog writing to log at info level.
func NewFindingLog(log *slog.Logger) *FindingLog {
	return &FindingLog{log: ratelog.New(log, ratelog.Config{Interval: time.Minute, Burst: FindingLogBurst})}
}

func (l *FindingLog) Call(*audit.Record)                   {}
func (l *FindingLog) Write(*audit.Write, audit.WriteState) {}

func (l *FindingLog) Finding(f *audit.Finding) {
	args := []any{"id", f.ID(), "finding_kind", string(f.Kind), "severity", string(f.Severity),
		"tenant", f.Tenant, "server", f.Server, "time", f.Time, "evidence_calls", len(f.Calls)}
	if f.RetryAction != "" {
		args = append(args, "retry_action", string(f.RetryAction))
	}
	l.log.Info("finding", "finding", args...)
}

// Flush writes the count of finding lines the rate limit suppressed.
func (l *FindingLog) Flush() { l.log.Flush() }
