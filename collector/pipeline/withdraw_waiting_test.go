package pipeline_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// waitingLine is the start of the line the collector logs once per
// withdrawal the store refuses.
const waitingLine = "the store refused the withdrawal of a stored unverified_write finding"

// TestWithdrawalWaiting_Told (wd21): the store takes the commits but
// refuses, as unavailable, the withdrawal of the unverified_write a call
// judged late showed wrong (crashStore.failChange over the real SQLite
// store: the one fault injected). Before wd21 the withdrawal was retried
// at every commit and nothing told it: no log line, no metric, no status
// of its own. Now the collector logs it once (not per retry),
// mcpaudit_withdrawals_waiting counts it while it waits (through the
// crash and restart that keep it in the state file), and both clear once
// the store takes it.
func TestWithdrawalWaiting_Told(t *testing.T) {
	s := newLateReplay(20 * time.Second)
	dir := t.TempDir()
	clock := newClock(wallStart)
	r := openRunDetect(t, dir, clock, nil, s.dedit, nil)
	open := s.closeWindow(t, r, clock)
	id := open[0]
	s.sendReplay(t, r, clock, &r.cs.failChange)
	r.steps(6, nil) // many commits, each retrying the withdrawal

	tenant := findingByID(t, r, id).Tenant
	gauge := func(r *run, want int) {
		t.Helper()
		reg := prometheus.NewRegistry()
		if err := metrics.WatchWithdrawals(reg, func() int { return r.p.WithdrawalsWaiting("") }); err != nil {
			t.Fatal(err)
		}
		help := ""
		for _, f := range metrics.Families {
			if f.Name == metrics.WithdrawalsWaiting {
				help = f.Help
			}
		}
		exp := "# HELP mcpaudit_withdrawals_waiting " + help + "\n# TYPE mcpaudit_withdrawals_waiting gauge\n" +
			fmt.Sprintf("mcpaudit_withdrawals_waiting %d\n", want)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), metrics.WithdrawalsWaiting); err != nil {
			t.Error(err)
		}
		if n := r.p.WithdrawalsWaiting(tenant); n != want {
			t.Errorf("%d withdrawals waiting for the finding's tenant, want %d", n, want)
		}
		if n := r.p.WithdrawalsWaiting(tenant + "-another"); n != 0 {
			t.Errorf("%d withdrawals waiting for another tenant, want 0", n)
		}
	}
	if f := findingByID(t, r, id); f.StateOf() == audit.FindingWithdrawn {
		t.Fatal("withdrawn while the store refuses: the test shows nothing")
	}
	gauge(r, 1)
	if n := strings.Count(r.logs.String(), waitingLine); n != 1 {
		t.Errorf("the refused withdrawal was logged %d times over the commits, want once:\n%s", n, r.logs.String())
	}
	r.crash()

	// The restart finds it in the state file: told at the start, not
	// logged again while the store still refuses it.
	r = openRunStore(t, dir, clock, nil, s.dedit, nil, func(cs *crashStore) { cs.failChange.Store(true) })
	r.steps(4, nil)
	gauge(r, 1)
	logs := r.logs.String()
	if n := strings.Count(logs, waitingLine); n != 0 {
		t.Errorf("the restart logged the refused withdrawal %d times, want 0 (the last run did)", n)
	}
	if !strings.Contains(logs, "withdrawals of stored unverified_write findings that the last run's store refused") {
		t.Errorf("the restart did not tell the withdrawals its state file kept:\n%s", logs)
	}
	r.cs.failChange.Store(false)
	r.steps(2, nil)
	gauge(r, 0)
	if f := findingByID(t, r, id); f.StateOf() != audit.FindingWithdrawn {
		t.Errorf("the finding is %s once the store takes changes, want withdrawn", f.StateOf())
	}
	if !strings.Contains(r.logs.String(), "withdrawals the store had refused are stored") {
		t.Errorf("nothing logged when the waiting withdrawal was stored:\n%s", r.logs.String())
	}
}
