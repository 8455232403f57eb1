package api

import (
	"fmt"
	"strings"
	"time"
)

// The lines mcpaudit status prints under its tables and the investigation
// page shows under its status line: why calls wait after a restart, and
// which source holds a partition back. One function each, so that both
// tell the same facts in the same words.

// restartHoldNamed is how many partitions held after a restart the
// status names; the rest are counted.
const restartHoldNamed = 5

// RestartHold returns the line telling that partitions hold their
// watermarks after a restart (PartitionStatus.HeldUntil), until when
// and how many calls wait for it, and whether any does. The downtime that
// set the hold's length is not in the status answer: the start-up log
// tells it.
func RestartHold(st StatusResponse) (string, bool) {
	var names []string
	var until time.Time
	waiting := 0
	for _, p := range st.Partitions {
		if p.HeldUntil == nil {
			continue
		}
		server := p.Server
		if p.Tenant != "" {
			server = p.Tenant + "/" + server
		}
		names = append(names, server)
		waiting += p.Buffered
		if p.HeldUntil.After(until) {
			until = *p.HeldUntil
		}
	}
	if len(names) == 0 {
		return "", false
	}
	n := len(names)
	what, verb := fmt.Sprintf("%d partitions", n), "wait"
	if n == 1 {
		what, verb = "1 partition", "waits"
	}
	if n > restartHoldNamed {
		names = append(names[:restartHoldNamed], fmt.Sprintf("%d more", n-restartHoldNamed))
	}
	more := max(until.Sub(st.Time), 0)
	secs := int64((more + time.Second - 1) / time.Second)
	calls, is := fmt.Sprintf("%d calls", waiting), "are"
	if waiting == 1 {
		calls, is = "1 call", "is"
	}
	return fmt.Sprintf("Restart hold: %s (%s) %s until %s (%d s more) for the backlogs of senders that kept their calls through the downtime (calls a sender dropped never come); the %s waiting there %s judged in time order once the hold ends (it is clamp(downtime, serve.pipeline.restart_grace, restart_grace_max) + detect.idle_timeout, the downtime in serve's start-up log; see serve.pipeline.restart_grace_max and docs/detection.md#time).",
		what, strings.Join(names, ", "), verb, until.UTC().Format("15:04:05Z"), secs, calls, is), true
}

// waitingCalls returns "N calls" and "wait", or "1 call" and "waits":
// the operator reads these lines at the start of an incident.
func waitingCalls(n int) (string, string) {
	if n == 1 {
		return "1 call", "waits"
	}
	return fmt.Sprintf("%d calls", n), "wait"
}

// NoWatermark returns the line telling that partition p has calls
// waiting but no watermark yet, and whether it has: mcpaudit status then
// shows its watermark and lag as "-", which an operator seeing a server's
// first calls (held for detect.join_wait) could not otherwise explain.
func NoWatermark(p PartitionStatus) (string, bool) {
	if p.Watermark != nil || p.Buffered == 0 {
		return "", false
	}
	server := p.Server
	if p.Tenant != "" {
		server = p.Tenant + "/" + server
	}
	calls, verb := waitingCalls(p.Buffered)
	return fmt.Sprintf("No watermark yet: %s of %s %s until it has one; a server seen for the first time waits detect.join_wait (10 s by default) for its other sources before it judges anything (docs/detection.md#time).",
		calls, server, verb), true
}

// heldBackGap is how far the source holding a partition must be behind
// the partition's other active sources for the status to point it out.
const heldBackGap = time.Minute

// HeldBack returns the line telling that partition p waits for a source
// further behind its other active sources than heldBackGap, and whether
// there is one.
func HeldBack(p PartitionStatus) (string, bool) {
	if p.HeldBy == "" {
		return "", false
	}
	var holder *SourceStatus
	others := time.Duration(-1)
	for i, s := range p.Sources {
		switch {
		case s.Name == p.HeldBy:
			holder = &p.Sources[i]
		case !s.Idle:
			if lag := time.Duration(s.LagSeconds * float64(time.Second)); others < 0 || lag < others {
				others = lag
			}
		}
	}
	if holder == nil {
		return "", false
	}
	server := p.Server
	if p.Tenant != "" {
		server = p.Tenant + "/" + server
	}
	if holder.Idle && holder.HoldLagSeconds != nil && holder.HoldUntil != nil && p.Buffered > 0 {
		// Idle, it holds at the lag it showed, not at the age of its
		// latest call, which grows; said whether or not the other
		// sources deliver (a quiet server waits for it too). The lag is
		// that of the newest call of each delivery: until live23's S2
		// the line said "its calls came 8s behind" where they came up
		// to 48 s behind.
		hold := time.Duration(*holder.HoldLagSeconds * float64(time.Second))
		calls, verb := waitingCalls(p.Buffered)
		return fmt.Sprintf("Held back: %s of %s %s for %s, idle: while it delivered, the newest call of each delivery came %s behind the wall clock, the calls before it in a delivery further behind (a slow clock, or an exporter that batches or lags), so %s's findings are held back by that much until %s at the latest, later by any time every source of %s is quiet (detect.max_clock_lag; docs/detection.md#time).",
			calls, server, verb, p.HeldBy, hold.Round(time.Second), server, holder.HoldUntil.UTC().Format("15:04:05Z"), server), true
	}
	if others < 0 {
		return "", false
	}
	lag := time.Duration(holder.LagSeconds * float64(time.Second))
	if lag-others < heldBackGap {
		return "", false
	}
	calls, verb := waitingCalls(p.Buffered)
	return fmt.Sprintf("Held back: %s of %s %s for %s, whose latest call is %s behind the wall clock while the other sources of %s are %s behind: its exporter lags or its clock is slow (a slow clock holds %s's findings back for as long as it runs; docs/detection.md#time).",
		calls, server, verb, p.HeldBy, lag.Round(time.Second), server, others.Round(time.Second), server), true
}

// JudgedLabel is what mcpaudit status and the page call Judged: every
// call acknowledged so far has been judged. It is about calls: a judged
// write may still be pending (PendingLine).
const JudgedLabel = "every acknowledged call judged"

// JudgedValue is what mcpaudit status and the page say after JudgedLabel:
// "no" while calls wait, "yes" when every call acknowledged is judged,
// and "yes, but for the N stored too late" when some of them were counted
// too late instead (st.TooLate since the start and st.TooLateBeforeStart
// before it: stored, never judged). A plain "yes" beside "133 too late
// (stored, never judged)" read as a contradiction (out25 O3).
func JudgedValue(st StatusResponse) string {
	if !st.Judged {
		return "no"
	}
	if n := st.TooLate + st.TooLateBeforeStart; n > 0 {
		return fmt.Sprintf("yes, but for the %d stored too late", n)
	}
	return "yes"
}

// PendingUntil returns the event time the last verification window of
// st's pending writes ends (the latest PartitionStatus.PendingUntil), or
// zero when none is pending.
func PendingUntil(st StatusResponse) time.Time {
	var until time.Time
	for _, p := range st.Partitions {
		if p.PendingUntil != nil && p.PendingUntil.After(until) {
			until = *p.PendingUntil
		}
	}
	return until
}

// OtherStoreLine returns the line telling that the data dir holds another
// store's history this server neither reads nor copies (StatusResponse.
// OtherStore), and false when it holds none.
func OtherStoreLine(st StatusResponse) (string, bool) {
	o := st.OtherStore
	if o == nil {
		return "", false
	}
	counts := fmt.Sprintf("%d calls and %d findings", o.Calls, o.Findings)
	if o.Calls < 0 {
		counts = "calls and findings that could not be counted"
	}
	return fmt.Sprintf("The data dir also holds the embedded store %s, with %s that this store does not hold: serve neither reads nor copies them; mcpaudit findings|timeline|calls --data-dir and verify --data-dir read them (docs/clickhouse.md#switching-from-the-embedded-store).", o.Path, counts), true
}

// StateFileLine returns the line telling what serve's start found wrong
// with its state file (StatusResponse.StateFile), and false when nothing.
func StateFileLine(st StatusResponse) (string, bool) {
	f := st.StateFile
	if f == nil {
		return "", false
	}
	var parts []string
	if f.Reason != "" {
		kept := "nothing of it was kept"
		if len(f.Kept) > 0 {
			kept = "its " + strings.Join(f.Kept, " and ") + " were kept"
		}
		where := "it could not be moved, and was replaced at the first save"
		if f.SetAside != "" {
			where = "set aside as " + f.SetAside
		}
		parts = append(parts, fmt.Sprintf("the state file could not be used at the start (%s): %s; %s, and every stored call was judged again (docs/runbooks.md#a-state-file-set-aside)", f.Reason, where, kept))
	}
	if n := f.SourcesToOverflow + f.SourcesDropped; n > 0 {
		parts = append(parts, fmt.Sprintf("the state file kept %d sources, more per partition than detect.max_sources: %d were restored, %d hold their partition through its overflow source, %d quiet ones were dropped (docs/detection.md#sources)",
			f.SourcesInFile, f.SourcesInFile-n, f.SourcesToOverflow, f.SourcesDropped))
	}
	if len(parts) == 0 {
		return "", false
	}
	s := strings.Join(parts, "; ")
	return "At the start, " + s + ".", true
}

// PendingLine returns the line telling how many judged writes are still
// pending and when the last of their windows ends, and false when st does
// not count them (PendingWrites below zero: an answer from a serve before
// the count, as mcpaudit status marks it).
func PendingLine(st StatusResponse) (string, bool) {
	switch {
	case st.PendingWrites < 0:
		return "", false
	case st.PendingWrites == 0:
		// Not "final": a durable write still becomes double_applied when
		// a late call within detect.allowed_lateness shows an earlier
		// application of the same edit (docs/metrics.md).
		return "Of the writes judged, none is pending; a late call within detect.allowed_lateness may still show a durable write was applied twice.", true
	}
	n := fmt.Sprintf("%d are", st.PendingWrites)
	if st.PendingWrites == 1 {
		n = "1 is"
	}
	return fmt.Sprintf("Of the writes judged, %s still pending: their state may change (a later call settles them, or their verification window, detect.verify_window, ends and makes them unverified); the last window ends at event time %s.",
		n, PendingUntil(st).UTC().Format(time.RFC3339)), true
}

// behindNamed is how many partitions behind the behind line names; the
// rest are counted.
const behindNamed = 3

// BehindLine returns the line telling how many of st's partitions are
// behind (PartitionStatus.FallenBehind: something waits for the watermark
// longer than the collector allows for) and by how much, and, when a
// partition with nothing waiting trails the wall clock, that its lag is
// only how late its last delivery came: an on-call engineer read such a
// lag as a backlog (op20's D4). False when st has no partition.
func BehindLine(st StatusResponse) (string, bool) {
	if len(st.Partitions) == 0 {
		return "", false
	}
	var named []string
	n := 0
	var quiet *PartitionStatus
	for i, p := range st.Partitions {
		if p.Watermark == nil || p.LagSeconds == nil {
			continue
		}
		if p.FallenBehind {
			n++
			if len(named) < behindNamed {
				named = append(named, fmt.Sprintf("%s %s", partitionName(p), secondsOf(*p.LagSeconds)))
			}
			continue
		}
		if p.Buffered == 0 && p.PendingWrites == 0 && (quiet == nil || *p.LagSeconds > *quiet.LagSeconds) {
			quiet = &st.Partitions[i]
		}
	}
	all := fmt.Sprintf("%d partitions", len(st.Partitions))
	if len(st.Partitions) == 1 {
		all = "1 partition"
	}
	var b strings.Builder
	if n == 0 {
		fmt.Fprintf(&b, "Behind: none of %s: no call waits for its watermark past detect.idle_timeout, and no judged write pending past detect.allowed_lateness.", all)
	} else {
		if n > len(named) {
			named = append(named, fmt.Sprintf("%d more", n-len(named)))
		}
		fmt.Fprintf(&b, "Behind: %d of %s (%s): calls wait for the watermark more than detect.idle_timeout behind the wall clock, or judged writes pending more than detect.allowed_lateness behind; their findings come that much late.",
			n, all, strings.Join(named, ", "))
	}
	if quiet != nil {
		fmt.Fprintf(&b, " %s: nothing waits; its watermark is %s behind the wall clock only because its last delivery came that long after its latest call (plus detect.lateness), and its next call moves it on: not a backlog.",
			partitionName(*quiet), secondsOf(*quiet.LagSeconds))
	}
	return b.String(), true
}

// partitionName names p as the status lines do: its server, after its
// tenant when it has one.
func partitionName(p PartitionStatus) string {
	if p.Tenant != "" {
		return p.Tenant + "/" + p.Server
	}
	return p.Server
}

// secondsOf returns s seconds as a duration to the millisecond, as the
// status prints a lag.
func secondsOf(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
