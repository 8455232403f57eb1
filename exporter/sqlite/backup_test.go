package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestBackup_WhileWriting: a backup taken while a writer commits batch
// after batch holds a whole number of those batches (a snapshot of one
// commit), opens as a store, and its tamper-evidence chain verifies.
func TestBackup_WhileWriting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mcpaudit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const batch = 50
	recs := records(t, 20000)
	if _, err := s.AppendCalls(ctx, recs[:batch*10]); err != nil {
		t.Fatal(err)
	}
	var stored atomic.Int64
	stored.Store(batch * 10)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := batch * 10; i+batch <= len(recs); i += batch {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.AppendCalls(ctx, recs[i:i+batch]); err != nil {
				t.Error(err)
				return
			}
			stored.Add(batch)
		}
	}()
	for stored.Load() < batch*40 {
		time.Sleep(time.Millisecond)
	}
	before := stored.Load()
	out := filepath.Join(t.TempDir(), "backup.db")
	info, err := Backup(ctx, path, out)
	after := stored.Load()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if info.Calls < before || info.Calls > after+batch || info.Calls%batch != 0 {
		t.Errorf("the backup holds %d calls; want a whole number of %d-call commits between %d and %d", info.Calls, batch, before, after+batch)
	}
	if info.Schema != schemaVersion || info.Path != out {
		t.Errorf("backup info %+v", info)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 || st.Size() != info.Bytes {
		t.Errorf("the backup file: %v, %v; want mode 0600 and %d bytes", st, err, info.Bytes)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), "*"))
	if len(left) != 1 {
		t.Errorf("files beside the backup: %v, want only it", left)
	}
	// The copy is a store: opened (its id index rebuilt) it holds exactly
	// the calls it counted, readable, and its chain verifies.
	r, err := Verify(ctx, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		var b strings.Builder
		r.Print(&b)
		t.Errorf("the backup's chain does not verify:\n%s", b.String())
	}
	restored := filepath.Join(t.TempDir(), "mcpaudit.db")
	if err := os.Rename(out, restored); err != nil {
		t.Fatal(err)
	}
	c, err := Open(restored, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := count(t, c); int64(n) != info.Calls {
		t.Errorf("the restored store holds %d calls, the backup counted %d", n, info.Calls)
	}
	// A call of the snapshot is found by its id, and a call stored after
	// it is new to the copy.
	if n, err := c.AppendCalls(ctx, recs[:1]); err != nil || n != 0 {
		t.Errorf("a call of the backup appended again: %d stored, %v; want 0", n, err)
	}
	if n, err := c.AppendCalls(ctx, []audit.Record{recs[len(recs)-1]}); err != nil || n != 1 {
		t.Errorf("a call after the backup: %d stored, %v; want 1", n, err)
	}
}

// TestBackup_Refuses: an existing destination is never overwritten, and a
// file that is not a store is neither backed up nor passed as a copy.
func TestBackup_Refuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mcpaudit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(ctx, records(t, 10)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	out := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(out, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Backup(ctx, path, out); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a backup over an existing file: %v, want refused", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "keep me" {
		t.Errorf("the existing file was changed: %q", b)
	}
	if _, err := CheckCopy(ctx, out); err == nil || !strings.Contains(err.Error(), out) {
		t.Errorf("CheckCopy of a text file: %v, want an error naming it", err)
	}
	if _, err := Backup(ctx, out, filepath.Join(t.TempDir(), "b.db")); err == nil {
		t.Error("a backup of a text file: want an error")
	}
	// A damaged copy fails the check: a page of the file overwritten.
	good := filepath.Join(t.TempDir(), "good.db")
	if _, err := Backup(ctx, path, good); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4096 * 2; i < 4096*3 && i < len(b); i++ {
		b[i] = 0xa5
	}
	bad := filepath.Join(t.TempDir(), "bad.db")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckCopy(ctx, bad); err == nil {
		t.Error("CheckCopy of a damaged copy: want an error")
	}
}
