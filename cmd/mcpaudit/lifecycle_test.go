package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// TestFindingsLifecycleCLI acknowledges a finding through a server and
// resolves it through the data dir, and reads both changes back from the
// API.
func TestFindingsLifecycleCLI(t *testing.T) {
	s, want := loadedServer(t)
	f := ofKind(want, audit.KindDoubleAppliedWrite)[0]
	base := "http://" + s.apiAddr
	cli := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, nil, &out, &errb)
		return out.String() + errb.String(), code
	}
	out, code := cli("findings", "ack", f.ID(), "--note", "looking", "--by", "ann", "--api-url", base)
	if code != 0 || !strings.Contains(out, "acknowledged by ann") {
		t.Fatalf("findings ack: exit %d: %s", code, out)
	}
	out, code = cli("findings", "--api-url", base, "--state", "acknowledged")
	if code != 0 || !strings.Contains(out, f.ID()) || strings.Count(out, "\n") != 2 {
		t.Errorf("findings --state acknowledged: exit %d:\n%s", code, out)
	}
	out, code = cli("findings", "resolve", f.ID(), "--note", "fixed by hand", "--by", "bob", "--data-dir", s.cfg.Serve.DataDir)
	if code != 0 || !strings.Contains(out, "resolved by bob") {
		t.Fatalf("findings resolve --data-dir: exit %d: %s", code, out)
	}
	var d api.FindingDetail
	getJSON(t, base+"/api/v1/findings/"+f.ID(), &d)
	if d.Finding.StateOf() != audit.FindingResolved || len(d.History) != 2 || d.History[0].By != "ann" || d.History[1].Note != "fixed by hand" {
		t.Errorf("after the CLI: %+v", d)
	}
	if out, code = cli("findings", "ack", f.ID(), "--server", base); code != 2 || !strings.Contains(out, "409") {
		t.Errorf("ack of a resolved finding: exit %d: %s", code, out)
	}
	if out, code = cli("findings", "ack", "f_00000000000000000000", "--data-dir", s.cfg.Serve.DataDir); code != 2 || !strings.Contains(out, "not found") {
		t.Errorf("ack of an unknown finding: exit %d: %s", code, out)
	}
}
