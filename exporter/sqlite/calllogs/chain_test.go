package calllogs_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/binary"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// chained is a data dir written by a signed store with its calls in call
// logs of small segments: several sealed ones and a live one.
type chained struct {
	dir  string
	key  ed25519.PrivateKey
	keys chain.Keys
	opts calllog.Options
	recs []audit.Record
}

func newChained(t *testing.T) *chained {
	t.Helper()
	// One key for every test and the killed child's serve.
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{51}, ed25519.SeedSize))
	pub := key.Public().(ed25519.PublicKey)
	return &chained{dir: t.TempDir(), key: key, keys: chain.KeysOf(pub), opts: calllog.Options{SegmentBytes: 8 << 10}}
}

// open opens the store of c with logs (nil: calllogs.Open of c.opts).
func (c *chained) open(t *testing.T, logs sqlite.CallLog) *sqlite.Store {
	t.Helper()
	if logs == nil {
		l, err := calllogs.Open(calllogs.Dir(c.dir), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		logs = l
	}
	st, err := sqlite.Open(filepath.Join(c.dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs, SigningKey: c.key})
	if err != nil {
		logs.Close()
		t.Fatal(err)
	}
	return st
}

// write appends recs in batches of ten (a block each) and closes.
func (c *chained) write(t *testing.T, recs []audit.Record) {
	t.Helper()
	st := c.open(t, nil)
	for i := 0; i < len(recs); i += 10 {
		if _, err := st.AppendCalls(context.Background(), recs[i:min(i+10, len(recs))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	c.recs = append(c.recs, recs...)
}

// verify runs VerifyLogged on dir as mcpaudit verify does and returns
// whether it passed and its report.
func (c *chained) verify(t *testing.T, dir string) (bool, string) {
	t.Helper()
	r, err := sqlite.VerifyLogged(context.Background(), filepath.Join(dir, "audit.db"), c.keys, func() (sqlite.BlockLog, error) {
		return calllogs.Open(calllogs.Dir(dir), calllog.Options{ReadOnly: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	r.Print(&b)
	return r.OK(), b.String()
}

// copyDir copies the data dir of c to a new one, to tamper with.
func (c *chained) copyDir(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(c.dir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(calllogs.Dir(dir), "*", "*.seg"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("want 3 segments at least, got %d (%v)", len(segs), err)
	}
	slices.Sort(segs)
	return segs
}

// blocksOf returns the offsets and sizes of the blocks of a segment file.
func blocksOf(t *testing.T, path string) (offs, sizes []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 8 // the header of a segment of a release before seal52
	if bytes.HasPrefix(b, []byte("\x00mccl2")) {
		off = 16 // since seal52: with its creation time
	}
	for off+37 <= len(b) {
		n := 37 + int(binary.LittleEndian.Uint32(b[off+4:]))
		offs, sizes = append(offs, off), append(sizes, n)
		off += n
	}
	return offs, sizes
}

// TestChain_BlocksOfTheCallLog: every block a store with its calls in
// call logs syncs is chained and signed, and verify hashes every block on
// disk again: a byte flipped in a sealed or the live segment, a block
// rewritten with a checksum of its own, a segment deleted or truncated,
// and a block whose record was deleted are each reported with the tenant,
// file and block. Fails on main: the chain recorded no block, and verify
// found none of these but the flipped bytes (checksums).
func TestChain_BlocksOfTheCallLog(t *testing.T) {
	c := newChained(t)
	recs := gen(t, 5).Records(400)
	c.write(t, recs[:200])
	c.write(t, recs[200:]) // a second open: blocks chained across it
	ok, out := c.verify(t, c.dir)
	if !ok || !strings.Contains(out, "400 calls") || !strings.Contains(out, "40 blocks hashed again") {
		t.Fatalf("verify of the written store: want ok, 40 blocks and 400 calls:\n%s", out)
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string) string // returns the file
		want   string
	}{
		{"byte_flipped_in_a_sealed_segment", func(t *testing.T, dir string) string {
			seg := segments(t, dir)[0]
			offs, _ := blocksOf(t, seg)
			flip(t, seg, int64(offs[1]+40))
			return seg + " block 1"
		}, "its bytes differ from what chain entry"},
		{"byte_flipped_in_the_live_segment", func(t *testing.T, dir string) string {
			segs := segments(t, dir)
			seg := segs[len(segs)-1]
			offs, _ := blocksOf(t, seg)
			flip(t, seg, int64(offs[0]+40))
			return seg + " block"
		}, "gone from the file"},
		{"block_rewritten_with_its_checksum", func(t *testing.T, dir string) string {
			segs := segments(t, dir)
			seg := segs[len(segs)-1]
			offs, sizes := blocksOf(t, seg)
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			// The block's latest call time moved a second on, and its
			// CRC-32C made again: a block the log reads as whole.
			blk := b[offs[0] : offs[0]+sizes[0]]
			binary.LittleEndian.PutUint64(blk[24:], binary.LittleEndian.Uint64(blk[24:])+uint64(time.Second))
			sum := crc32.Update(crc32.Checksum(blk[:33], crc32.MakeTable(crc32.Castagnoli)), crc32.MakeTable(crc32.Castagnoli), blk[37:])
			binary.LittleEndian.PutUint32(blk[33:], sum)
			if err := os.WriteFile(seg, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return seg + " block 0"
		}, "its bytes differ from what chain entry"},
		{"sealed_segment_deleted", func(t *testing.T, dir string) string {
			seg := segments(t, dir)[1]
			if err := os.Remove(seg); err != nil {
				t.Fatal(err)
			}
			os.Remove(strings.TrimSuffix(seg, ".seg") + ".idx")
			return seg
		}, "the segment file is gone"},
		{"live_segment_truncated", func(t *testing.T, dir string) string {
			segs := segments(t, dir)
			seg := segs[len(segs)-1]
			offs, _ := blocksOf(t, seg)
			if err := os.Truncate(seg, int64(offs[len(offs)-1]+10)); err != nil {
				t.Fatal(err)
			}
			return seg + " block"
		}, "gone from the file"},
		{"block_record_deleted", func(t *testing.T, dir string) string {
			db, err := sql.Open("sqlite", filepath.Join(dir, "audit.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var seg int64
			if err := db.QueryRow(`SELECT min(seg) FROM chain_blocks`).Scan(&seg); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`DELETE FROM chain_blocks WHERE seg = ? AND block = 1`, seg); err != nil {
				t.Fatal(err)
			}
			return segments(t, dir)[0] + " block 1"
		}, "is in no chain entry of its tenant"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := c.copyDir(t)
			where := tc.tamper(t, dir)
			ok, out := c.verify(t, dir)
			if ok {
				t.Fatalf("verify passed:\n%s", out)
			}
			if !strings.Contains(out, "TAMPERED: tenant \"\": call log "+where) || !strings.Contains(out, tc.want) {
				t.Errorf("verify does not report %q at %s:\n%s", tc.want, where, out)
			}
		})
	}
}

func flip(t *testing.T, path string, at int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0x40
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestChain_RetentionOfTheCallLog: the segments retention removes (wholly
// before the cut) are no tampering, as the cut is chained before they go;
// a cuts file moved on by hand, which hides calls from reads, is; so is a
// segment deleted past the chained cut. Fails on main: the cut was not
// chained, and verify did not look at the cuts file.
func TestChain_RetentionOfTheCallLog(t *testing.T) {
	c := newChained(t)
	recs := gen(t, 6).Records(300)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	c.write(t, recs)
	st := c.open(t, nil)
	cut := recs[150].Call.Time
	if _, err := st.DeleteBefore(context.Background(), cut); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	ok, out := c.verify(t, c.dir)
	if !ok || !strings.Contains(out, "in segments retention removed") {
		t.Fatalf("verify after retention: want ok, with blocks of removed segments:\n%s", out)
	}
	t.Run("cuts_file_moved_on", func(t *testing.T) {
		dir := c.copyDir(t)
		path := filepath.Join(calllogs.Dir(dir), "cuts")
		if err := os.WriteFile(path, []byte("- "+itoa(recs[250].Call.Time.UnixNano())+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ok, out := c.verify(t, dir)
		if ok || !strings.Contains(out, "the call logs' cuts file: puts the tenant's retention cut at") {
			t.Errorf("verify of a cuts file moved on: want TAMPERED:\n%s", out)
		}
	})
	t.Run("segment_past_the_cut_deleted", func(t *testing.T) {
		dir := c.copyDir(t)
		segs, _ := filepath.Glob(filepath.Join(calllogs.Dir(dir), "*", "*.seg"))
		slices.Sort(segs)
		if err := os.Remove(segs[len(segs)-2]); err != nil {
			t.Fatal(err)
		}
		ok, out := c.verify(t, dir)
		if ok || !strings.Contains(out, "not before the tenant's chained retention cut") {
			t.Errorf("verify of a segment past the cut deleted: want TAMPERED:\n%s", out)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestChain_AdoptsAnUnchainedLog: the blocks of logs written before the
// chain covered them (here: by the logs alone) are chained at the store's
// next open, and verify passes. Fails on main: nothing chained them.
func TestChain_AdoptsAnUnchainedLog(t *testing.T) {
	c := newChained(t)
	logs, err := calllogs.Open(calllogs.Dir(c.dir), c.opts)
	if err != nil {
		t.Fatal(err)
	}
	recs := gen(t, 7).Records(100)
	for i := 0; i < len(recs); i += 10 {
		if _, err := logs.Append(context.Background(), recs[i:i+10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := logs.Close(); err != nil {
		t.Fatal(err)
	}
	st := c.open(t, nil)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, out := c.verify(t, c.dir); !ok || !strings.Contains(out, "10 blocks hashed again") || strings.Contains(out, "not chained yet") {
		t.Fatalf("verify: want ok, 10 blocks chained:\n%s", out)
	}
}

// hungLogs is the call logs with the store's hook held: the block is
// synced, the chain never told. The child of TestChain_KilledBeforeChain
// is killed there.
type hungLogs struct{ *calllogs.Logs }

func (h hungLogs) ChainBlocks(fn func(sqlite.LogBlock)) bool {
	return h.Logs.ChainBlocks(func(b sqlite.LogBlock) {
		if b.Block == 3 {
			os.Stdout.WriteString("synced\n")
			select {} // killed here
		}
		fn(b)
	})
}

// TestChain_KilledBeforeChain: a serve killed (SIGKILL, a real process)
// between a block's sync and its chain entry's commit leaves the block
// synced and unchained; the next open chains it (and says so), and verify
// passes with every call. The point of the kill is held by a hook on the
// log's side (hungLogs), the one thing a real part cannot be made to do.
// Fails on main: the block stayed unchained.
func TestChain_KilledBeforeChain(t *testing.T) {
	if dir := os.Getenv("CHAIN51_CHILD"); dir != "" {
		c := newChained(t)
		c.dir = dir
		logs, err := calllogs.Open(calllogs.Dir(dir), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		st := c.open(t, hungLogs{logs})
		recs := gen(t, 8).Records(100)
		for i := 0; i < len(recs); i += 10 {
			if _, err := st.AppendCalls(context.Background(), recs[i:i+10]); err != nil {
				t.Fatal(err)
			}
			// A commit of results chains the blocks synced before it, as
			// serve's pipeline's do.
			if err := st.Commit(context.Background(), audit.Results{}); err != nil {
				t.Fatal(err)
			}
		}
		t.Fatal("the hook did not hold the fourth block")
	}
	c := newChained(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChain_KilledBeforeChain$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CHAIN51_CHILD="+c.dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	var got []byte
	for !bytes.Contains(got, []byte("synced\n")) {
		n, err := out.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("the child ended before the fourth block: %s", got)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// The fourth block is on disk, the chain stops at the third.
	db, err := sql.Open("sqlite", filepath.Join(c.dir, "audit.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM chain_blocks`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if n != 3 {
		t.Fatalf("%d blocks chained before the kill, want 3", n)
	}
	if ok, out := c.verify(t, c.dir); !ok || !strings.Contains(out, "1 block on disk after the last one chained is not chained yet") {
		t.Errorf("verify before the reopen: want ok with 1 block not chained yet:\n%s", out)
	}
	st := c.open(t, nil)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, out := c.verify(t, c.dir); !ok || !strings.Contains(out, "4 blocks hashed again") || !strings.Contains(out, "40 calls") {
		t.Errorf("verify after the reopen: want ok, 4 blocks, 40 calls:\n%s", out)
	}
}
