package calllogs_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// TestOpenFiles_ManyTenantsLowLimit: 40 tenants' logs of 16 sealed
// segments each (640 segment files) under RLIMIT_NOFILE 400, set in a
// child process of the test binary: every call is stored, and read back
// after the logs are opened again, by time and by id, with the files open
// below the limit. Until fd52 each log kept every segment's file open
// (adv51: 6 of 1000 tenants refused under ulimit -n 1024): the appends
// failed "too many open files" past the limit.
func TestOpenFiles_ManyTenantsLowLimit(t *testing.T) {
	const (
		limit    = 400
		tenants  = 40
		segments = 16
		perBlock = 5
	)
	dir := os.Getenv("MCPAUDIT_FD52_CHILD")
	if dir == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenFiles_ManyTenantsLowLimit$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "MCPAUDIT_FD52_CHILD="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the child under RLIMIT_NOFILE %d: %v\n%s", limit, err, out)
		}
		return
	}
	rl := syscall.Rlimit{Cur: limit, Max: limit}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatalf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	ctx := context.Background()
	recs := gen(t, 52).Records(tenants * segments * perBlock)
	opts := calllog.Options{SegmentBytes: 1} // every block sealed
	logs, err := calllogs.Open(calllogs.Dir(dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].Call.Tenant = "t" + strconv.Itoa(i%tenants)
	}
	byTenant := map[string][]audit.Record{}
	for _, r := range recs {
		byTenant[r.Call.Tenant] = append(byTenant[r.Call.Tenant], r)
	}
	for tenant, rs := range byTenant {
		for i := 0; i < len(rs); i += perBlock {
			if held, err := logs.Append(ctx, rs[i:i+perBlock]); err != nil || len(held) > 0 {
				t.Fatalf("Append of tenant %s's block %d: held %v, %v", tenant, i/perBlock, held, err)
			}
		}
	}
	if st, err := logs.Stats(); err != nil || st.Segments != tenants*(segments+1) {
		t.Fatalf("Stats = %+v, %v; want %d segments", st, err, tenants*(segments+1))
	}
	if err := logs.Close(); err != nil {
		t.Fatal(err)
	}
	if logs, err = calllogs.Open(calllogs.Dir(dir), opts); err != nil {
		t.Fatalf("open of %d segment files again: %v", tenants*(segments+1), err)
	}
	defer logs.Close()
	n := 0
	err = logs.Scan(ctx, sqlite.CallScan{}, func(r *audit.Record) error {
		n++
		return nil
	})
	if err != nil || n != len(recs) {
		t.Fatalf("Scan read %d calls, %v; want %d", n, err, len(recs))
	}
	for i := 0; i < len(recs); i += 3 {
		got, err := logs.Get(ctx, recs[i].Call.ID, recs[i].Call.Time)
		if err != nil || len(got) != 1 || got[0].Call.Tenant != recs[i].Call.Tenant {
			t.Fatalf("Get %s of tenant %s: %d calls, %v", recs[i].Call.ID, recs[i].Call.Tenant, len(got), err)
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	// One live segment a tenant, calllog.DefaultOpenFiles sealed ones,
	// the test's own.
	if want := tenants + 256 + 32; len(fds) > want {
		t.Errorf("%d files open after the reads, want %d at most", len(fds), want)
	}
}

// TestOpenFiles_DefaultAgrees: the store's default bound
// (serve.sqlite.call_log_open_files) is the log's.
func TestOpenFiles_DefaultAgrees(t *testing.T) {
	if got := sqlite.NewDefaultOptions().CallLogOpenFiles; got != calllog.DefaultOpenFiles {
		t.Errorf("sqlite's default call_log_open_files %d, calllog.DefaultOpenFiles %d", got, calllog.DefaultOpenFiles)
	}
}
