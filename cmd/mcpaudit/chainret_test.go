package main

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// TestRetention_CallLogChainVerify: a data dir whose calls are in call
// logs of small segments, written over six periods with a retention pass
// each by a store signing with a key from mcpaudit keygen, holds no record
// of a block of a removed segment, and mcpaudit verify --public-key passes
// on it (exit 0); with a record of a kept block deleted it fails (exit 1,
// TAMPERED). Fails on main: every record of a removed segment was kept.
func TestRetention_CallLogChainVerify(t *testing.T) {
	priv, pub := keyPair(t)
	key, err := chain.ReadPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	g, err := storetest.NewGenerator(53, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	const periods, per = 6, 100
	recs := g.Records(periods * per)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	ctx := context.Background()
	for i := range periods {
		logs, err := calllogs.Open(calllogs.Dir(dir), calllog.Options{SegmentBytes: 8 << 10})
		if err != nil {
			t.Fatal(err)
		}
		st, err := sqlite.Open(filepath.Join(dir, storeFile), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs, SigningKey: key})
		if err != nil {
			t.Fatal(err)
		}
		for j := i * per; j < (i+1)*per; j += 10 {
			if _, err := st.AppendCalls(ctx, recs[j:j+10]); err != nil {
				t.Fatal(err)
			}
		}
		if i >= 2 {
			if _, err := st.DeleteBefore(ctx, recs[(i-1)*per].Call.Time); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(calllogs.Dir(dir), "*", "*.seg"))
	slices.Sort(segs)
	first := strings.TrimSuffix(filepath.Base(segs[0]), ".seg")
	db, err := sql.Open("sqlite", filepath.Join(dir, storeFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stale int
	if err := db.QueryRow(`SELECT count(*) FROM chain_blocks WHERE seg < CAST(? AS INTEGER)`, first).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if stale > 0 {
		t.Errorf("chain_blocks holds %d records of blocks in segments retention removed (the first on disk is %s)", stale, first)
	}
	verify := func() (int, string) {
		var out, errb bytes.Buffer
		code := run(ctx, []string{"verify", "--data-dir", dir, "--public-key", pub}, nil, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, "blocks hashed again and matched the chain") {
		t.Fatalf("verify after retention: exit %d, want 0:\n%s", code, out)
	}
	if _, err := db.Exec(`DELETE FROM chain_blocks WHERE (seg, block) = (SELECT seg, block FROM chain_blocks ORDER BY seg, block LIMIT 1 OFFSET 1)`); err != nil {
		t.Fatal(err)
	}
	if code, out := verify(); code != 1 || !strings.Contains(out, "is in no chain entry of its tenant") {
		t.Errorf("verify with a record of a kept block deleted: exit %d, want 1 with TAMPERED:\n%s", code, out)
	}
}
