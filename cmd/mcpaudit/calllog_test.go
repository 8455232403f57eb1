package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/report"
)

// treeSums returns the SHA-256 of every file under dir by path.
func treeSums(t *testing.T, dir string) map[string][sha256.Size]byte {
	t.Helper()
	out := map[string][sha256.Size]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = sha256.Sum256(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unchanged fails t, naming who, when a file of dataDir's call logs is not
// as treeSums found it before (before): added, removed or changed.
func unchanged(t *testing.T, who, dataDir string, before map[string][sha256.Size]byte) {
	t.Helper()
	after := treeSums(t, calllogs.Dir(dataDir))
	if len(after) != len(before) {
		t.Errorf("%s left %d files of the call logs, were %d", who, len(after), len(before))
	}
	for p, sum := range before {
		if after[p] != sum {
			t.Errorf("%s changed %s", who, p)
		}
	}
}

// TestCallsLog_ReadAndBackupBesideServe: with serve.sqlite.calls: log and
// serve running, export, calls and verify with --data-dir read the calls
// from the call logs (opened read-only: no file of them changes, no
// warning that they are not read), and a backup taken while serve ingests
// more calls, restored after the data dir lost its store and its logs,
// holds every call acknowledged before the backup began. Before the
// read-only open, export refused (exit 2), calls warned and read none,
// and the backup held no call.
func TestCallsLog_ReadAndBackupBesideServe(t *testing.T) {
	dir, cfg := callsLogConfig(t)
	recs := mergedCapture(t)
	body := ndjson(recs)
	want := analyzeFindings(t, cfg, body)
	s, calls := serveCapture(t, cfg, body, want)
	if !calllogs.InUse(dir) || len(calls) == 0 {
		t.Fatalf("serve with calls: log: %d calls, logs in use %v", len(calls), calllogs.InUse(dir))
	}

	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, nil, &out, &errb)
		return code, out.String(), errb.String()
	}
	before := treeSums(t, calllogs.Dir(dir))
	code, out, errs := cli("export", "--data-dir", dir)
	if n := strings.Count(out, "\n"); code != 0 || n != len(calls) {
		t.Errorf("export --data-dir beside serve: exit %d, %d calls of %d: %s", code, n, len(calls), errs)
	}
	code, out, errs = cli("calls", "--data-dir", dir)
	if code != 0 || strings.Contains(errs, "WARNING") || !strings.Contains(out, "oddlynew") {
		t.Errorf("calls --data-dir beside serve: exit %d: %s%s", code, out, errs)
	}
	// Beside serve: the blocks synced and not chained yet are a note.
	code, out, errs = cli("verify", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "hashed again and matched the chain") {
		t.Errorf("verify --data-dir beside serve: exit %d: %s%s", code, out, errs)
	}
	unchanged(t, "the readers", dir, before)

	// More calls, a day later each, posted while the backup is taken.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for day := 1; ; day++ {
			select {
			case <-stop:
				return
			default:
			}
			late := make([]map[string]any, len(recs))
			for i, r := range recs {
				m := map[string]any{}
				for k, v := range r {
					m[k] = v
				}
				tm, _ := time.Parse(time.RFC3339Nano, r["time"].(string))
				m["time"] = tm.Add(time.Duration(day) * 24 * time.Hour).Format(time.RFC3339Nano)
				late[i] = m
			}
			if err := postCallsAs(s.ingestAddr, "late", ndjson(late)); err != nil {
				return
			}
		}
	}()
	copyFile := filepath.Join(t.TempDir(), "backup.db")
	code, out, errs = cli("backup", "--data-dir", dir, "--out", copyFile)
	close(stop)
	wg.Wait()
	if code != 0 || !strings.Contains(out, "wrote "+callsCopy(copyFile)) || strings.Contains(errs, "WARNING") {
		t.Fatalf("backup while serve ingests: exit %d: %s%s", code, out, errs)
	}
	t.Log(out)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The disk loses the store and the call logs.
	for _, p := range []string{filepath.Join(dir, storeFile), calllogs.Dir(dir)} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs = cli("restore", "--data-dir", dir, "--from", copyFile)
	if code != 0 || !strings.Contains(out, "calls of the call logs") {
		t.Fatalf("restore: exit %d: %s%s", code, out, errs)
	}
	cfg = testConfig(t, dir)
	cfg.Serve.SQLite.Calls = sqlite.CallsLog
	s = startTest(t, cfg)
	restored := map[string]bool{}
	for _, c := range apiCalls(t, s) {
		restored[c] = true
	}
	missing := 0
	for _, c := range calls {
		if !restored[c] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("the restored store lacks %d of the %d calls acknowledged before the backup (%d restored)", missing, len(calls), len(restored))
	}
}

// flipFirstBlock flips a byte inside the first block of the first segment
// of the call logs in dir, and returns the segments found there.
func flipFirstBlock(t *testing.T, dir string) []string {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*", "*.seg"))
	if len(segs) == 0 {
		t.Fatalf("no segment of calls in %s", dir)
	}
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	b[40] ^= 0x40 // inside the first block (a header of 8 bytes, a block's of 32 or more)
	if err := os.WriteFile(segs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	return segs
}

// callsLogConfig returns a new data dir and a test config of serve on it
// with serve.sqlite.calls: log.
func callsLogConfig(t *testing.T) (string, Config) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Serve.SQLite.Calls = sqlite.CallsLog
	return dir, cfg
}

// TestCallsLog_VerifyFindsFlippedByte: a byte flipped in a block of a call
// log with a whole block after it fails verify, which names the file (the
// blocks the chain records are not read past the damaged one).
func TestCallsLog_VerifyFindsFlippedByte(t *testing.T) {
	dir, cfg := callsLogConfig(t)
	postAndStop(t, cfg, 2) // two posts: two blocks at least
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"verify", "--data-dir", dir}, nil, &out, &errb); code != 0 {
		t.Fatalf("verify before the flip: exit %d: %s%s", code, out.String(), errb.String())
	}
	segs := flipFirstBlock(t, calllogs.Dir(dir))
	out.Reset()
	errb.Reset()
	code := run(context.Background(), []string{"verify", "--data-dir", dir}, nil, &out, &errb)
	if code != 1 || !strings.Contains(out.String()+errb.String(), segs[0]) {
		t.Errorf("verify after a byte of %s flipped: exit %d: %s%s", segs[0], code, out.String(), errb.String())
	}
}

// TestCallsLog_ReportBesideServe: mcpaudit report --data-dir over a data
// dir whose calls serve keeps in call logs, serve running, gives the
// report serve's API gives, with the configuration (calls: log) or
// without, and the report of the same capture stored with calls: sqlite;
// it changes no byte of the logs. Before report opened the data dir as
// the other readers do (openReading), it failed with the configuration
// ("calls: log without a call log") and, without, read no call: its
// failures (7) and retry mix came out empty.
func TestCallsLog_ReportBesideServe(t *testing.T) {
	body := ndjson(mergedCapture(t))
	// The window ends at a fixed time (the capture is of 2026-11-02): a
	// report ending now would have another window at each run.
	args := []string{"report", "--window", "2d", "--until", "2026-11-03T00:00:00Z", "--format", "json"}
	reportOf := func(name string, more ...string) map[string]string {
		t.Helper()
		code, out, errs := cliRun(append(append([]string{}, args...), more...)...)
		if code != 0 {
			t.Errorf("report %s: exit %d: %s", name, code, errs)
			return nil
		}
		var r report.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("report %s: %v\n%s", name, err, out)
		}
		if r.BadEvents == 0 || r.Failures == 0 || len(r.ByClient) == 0 || r.FindingsTotal == 0 {
			t.Errorf("report %s: %d bad events, %d failed calls, %d clients, %d findings: the capture has some of each", name, r.BadEvents, r.Failures, len(r.ByClient), r.FindingsTotal)
		}
		r.Generated = time.Time{}
		b, _ := json.Marshal(r)
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for k, v := range fields {
			m[k] = string(v)
		}
		return m
	}
	// differ says the report's fields that differ from want's.
	differ := func(got, want map[string]string) string {
		var d []string
		for k, v := range want {
			if got[k] != v {
				d = append(d, fmt.Sprintf("%s: %s, want %s", k, got[k], v))
			}
		}
		slices.Sort(d)
		return strings.Join(d, "\n")
	}

	plain := t.TempDir()
	cfg := testConfig(t, plain)
	s, _ := serveCapture(t, cfg, body, analyzeFindings(t, cfg, body))
	want := reportOf("with calls: sqlite, through serve's API", "--api-url", "http://"+s.apiAddr)
	if d := differ(reportOf("with calls: sqlite, from the data dir", "--data-dir", plain), want); d != "" {
		t.Fatalf("with calls: sqlite, the data dir's report differs from the API's:\n%s", d)
	}

	dir, cfg := callsLogConfig(t)
	s, _ = serveCapture(t, cfg, body, analyzeFindings(t, cfg, body))
	if !calllogs.InUse(dir) {
		t.Fatal("serve with calls: log keeps no call log")
	}
	cfgFile := filepath.Join(t.TempDir(), "mcpaudit.yaml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("serve:\n  data_dir: %q\n  sqlite:\n    calls: log\n", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treeSums(t, calllogs.Dir(dir))
	for _, src := range []struct {
		name string
		args []string
	}{
		{"through serve's API", []string{"--api-url", "http://" + s.apiAddr}},
		{"from the data dir", []string{"--data-dir", dir}},
		{"from the data dir of the configuration", []string{"--config", cfgFile}},
	} {
		if d := differ(reportOf("with calls: log, "+src.name, src.args...), want); d != "" {
			t.Errorf("with calls: log, the report %s differs from calls: sqlite's:\n%s", src.name, d)
		}
	}
	unchanged(t, "report", dir, before)
}

// TestCallsLog_SwitchBackRefused: serve with serve.sqlite.calls: sqlite on
// a data dir whose calls serve kept in call logs is refused, naming the
// logs and their calls, as calls: log refuses a calls table that holds
// calls. Before adv51 it started, answered every query with none of the
// logs' calls (0 calls where the logs held them all; findings still
// there), and stored new calls in the calls table, where the --data-dir
// readers, who go by the logs, do not look.
func TestCallsLog_SwitchBackRefused(t *testing.T) {
	dir, cfg := callsLogConfig(t)
	recs := mergedCapture(t)
	s := startTest(t, cfg)
	if err := postCallsAs(s.ingestAddr, "p", ndjson(recs)); err != nil {
		t.Fatal(err)
	}
	count := func(s *server) int {
		n := 0
		if err := s.store.ScanCalls(context.Background(), time.Time{}, func(*audit.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stored := count(s)
	if stored == 0 {
		t.Fatal("no call stored")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Serve.SQLite.Calls = sqlite.CallsSQLite
	s2, err := startServer(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		s2.shutdown(ctx)
		t.Fatal("serve with calls: sqlite opened a data dir whose calls are in call logs")
	}
	want := fmt.Sprintf("%s holds %d calls", calllogs.Dir(dir), stored)
	if !errors.Is(err, calllogs.ErrInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("serve with calls: sqlite: %v; want %v saying %q", err, calllogs.ErrInUse, want)
	}
	// Back to calls: log, every call is there.
	cfg.Serve.SQLite.Calls = sqlite.CallsLog
	if n := count(startTest(t, cfg)); n != stored {
		t.Fatalf("calls: log again: %d calls, want %d", n, stored)
	}
}

// TestCallsLog_VerifyChain: the blocks serve syncs to the call logs are
// chained and signed; mcpaudit verify --public-key passes on the data dir
// as serve left it, and fails (exit 1, TAMPERED naming the tenant, file
// and block) on a block rewritten with a checksum of its own, a truncated
// segment, a deleted segment file and a block whose record was deleted
// from the chain. Fails on main: verify passed the rewritten block and
// the deleted record (checksums only), and named no block.
func TestCallsLog_VerifyChain(t *testing.T) {
	dir, pub := signedCallsLog(t)
	verify := func(dir string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"verify", "--data-dir", dir, "--public-key", pub}, nil, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := verify(dir); code != 0 || !strings.Contains(out, "blocks hashed again and matched the chain") || strings.Contains(out, "WARNING") {
		t.Fatalf("verify of the data dir serve left: exit %d:\n%s", code, out)
	}
	seg := func(dir string) string {
		segs, _ := filepath.Glob(filepath.Join(calllogs.Dir(dir), "*", "*.seg"))
		if len(segs) != 1 {
			t.Fatalf("want one segment, got %v", segs)
		}
		return segs[0]
	}
	// The blocks of a segment: offset and size (a block's header is 37
	// bytes, its body's length at bytes 4-7; the segment's header 16,
	// 8 before seal52).
	blocks := func(b []byte) (offs, sizes []int) {
		off := 8
		if bytes.HasPrefix(b, []byte("\x00mccl2")) {
			off = 16
		}
		for off+37 <= len(b) {
			n := 37 + int(binary.LittleEndian.Uint32(b[off+4:]))
			offs, sizes = append(offs, off), append(sizes, n)
			off += n
		}
		return offs, sizes
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string) string // the place verify must name
	}{
		{"block_rewritten_with_its_checksum", func(t *testing.T, dir string) string {
			path := seg(dir)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			offs, sizes := blocks(b)
			blk := b[offs[1] : offs[1]+sizes[1]]
			blk[24] ^= 1 // its latest call time, and its CRC-32C made again
			tab := crc32.MakeTable(crc32.Castagnoli)
			binary.LittleEndian.PutUint32(blk[33:], crc32.Update(crc32.Checksum(blk[:33], tab), tab, blk[37:]))
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return path + " block 1: its bytes differ"
		}},
		{"segment_truncated", func(t *testing.T, dir string) string {
			path := seg(dir)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			offs, _ := blocks(b)
			if err := os.Truncate(path, int64(offs[len(offs)-1])); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("%s block %d: chained from entry", path, len(offs)-1)
		}},
		{"segment_deleted", func(t *testing.T, dir string) string {
			path := seg(dir)
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			return path + ": the segment file is gone"
		}},
		{"block_record_deleted", func(t *testing.T, dir string) string {
			path := seg(dir)
			db, err := sql.Open("sqlite", filepath.Join(dir, storeFile))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`DELETE FROM chain_blocks WHERE block = 0`); err != nil {
				t.Fatal(err)
			}
			return path + " block 0: is in no chain entry"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cp := t.TempDir()
			if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			where := tc.tamper(t, cp)
			code, out := verify(cp)
			if code != 1 || !strings.Contains(out, "TAMPERED: tenant \"\": call log "+where) {
				t.Errorf("verify: exit %d, want 1 with TAMPERED at %q:\n%s", code, where, out)
			}
		})
	}
}

// keyPair writes a signing key and its public key with mcpaudit keygen
// and returns their files.
func keyPair(t *testing.T) (priv, pub string) {
	t.Helper()
	keys := t.TempDir()
	priv, pub = filepath.Join(keys, "signing.pem"), filepath.Join(keys, "verify.pem")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"keygen", "--private-key", priv, "--public-key", pub}, nil, &out, &errb); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errb.String())
	}
	return priv, pub
}

// signedCallsLog runs serve with calls: log and a signing key over three
// posts of the merged capture, stops it, and returns its data dir and the
// public key that verifies its checkpoints.
func signedCallsLog(t *testing.T) (dir, pub string) {
	priv, pub := keyPair(t)
	dir, cfg := callsLogConfig(t)
	cfg.Serve.SigningKeyFile = priv
	postAndStop(t, cfg, 3)
	return dir, pub
}

// postAndStop starts serve with cfg, posts the merged capture in parts
// posts (a block each at least) and stops it.
func postAndStop(t *testing.T, cfg Config, parts int) {
	t.Helper()
	recs := mergedCapture(t)
	s := startTest(t, cfg)
	for i := range parts {
		part := recs[i*len(recs)/parts : (i+1)*len(recs)/parts]
		if err := postCallsAs(s.ingestAddr, "p", ndjson(part)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
