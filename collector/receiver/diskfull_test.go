package receiver_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/tmpfs"
)

// TestIngest_DiskFull: on a real full disk (a 2 MiB tmpfs, filled), a
// request whose calls the store cannot write is refused 503 with the
// reason in the answer, "store: disk full (ENOSPC) writing mcpaudit.db",
// not the bare "cannot store calls now" that left the sender (and whoever
// reads its log) without the cause, which only serve's log named (found
// by adv46). With ack "log" the call log's segment is the file named
// (op47: its error had lost the path, and the answer said "writing its
// files"). Skipped, loudly, where a tmpfs cannot be mounted (not root).
func TestIngest_DiskFull(t *testing.T) {
	t.Run("commit", func(t *testing.T) {
		ingestDiskFull(t, sqlite.NewDefaultOptions(), "mcpaudit.db")
	})
	t.Run("log", func(t *testing.T) {
		opts := sqlite.NewDefaultOptions()
		opts.Ack = sqlite.AckLog
		ingestDiskFull(t, opts, "00000000000000000001.log")
	})
}

func ingestDiskFull(t *testing.T, opts sqlite.Options, file string) {
	dir := tmpfs.Mount(t, "2m")
	e := newEnvAt(t, filepath.Join(dir, "mcpaudit.db"), opts, nil)
	// The disk filled by another file, as by another process.
	junk, err := os.Create(filepath.Join(dir, "junk"))
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 4096)
	for {
		if _, err := junk.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	junk.Close()
	big := strings.Repeat("x", 2000)
	now := time.Now().UTC()
	var last answer
	for req := 0; req < 50; req++ {
		var body strings.Builder
		for i := range 200 {
			fmt.Fprintf(&body, `{"time":%q,"server":"thegram","session":"s%d","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_projects","arguments":{"note":%q}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}}`+"\n",
				now.Add(-time.Minute).Format(time.RFC3339Nano), req, i, big, i)
		}
		last = e.post(t, "/v1/calls", "application/x-ndjson", tokAcme, []byte(body.String()))
		if last.status != 200 {
			break
		}
	}
	if last.status != 503 {
		t.Fatalf("50 requests of 200 calls of 2 KB each taken on a 2 MiB disk already full: last answer %d %s", last.status, last.body)
	}
	if want := "store: disk full (ENOSPC) writing " + file + ";"; !strings.Contains(last.body, want) || strings.Contains(last.body, dir) {
		t.Errorf("answer %d %s, want the reason, %s, and no path", last.status, last.body, want)
	}
}

// TestStoreRefusedReason: what a sender refused by the store is told,
// from the store's error: the reason for a full disk, with the file's base
// name; nothing of any other error's text.
func TestStoreRefusedReason(t *testing.T) {
	f := func(err error, want string) {
		t.Helper()
		if got := receiver.StoreRefused(err); got != want {
			t.Errorf("%v: told %q, want %q", err, got, want)
		}
	}
	f(errors.New("cannot append calls: secret /var/lib/x"), "cannot store calls now; retry later")
	f(fmt.Errorf("cannot append: %w", &fs.PathError{Op: "write", Path: "/data/mcpaudit.db.log/0001.seg", Err: syscall.ENOSPC}),
		"store: disk full (ENOSPC) writing 0001.seg; retry later")
	f(fmt.Errorf("cannot sync: %w", syscall.ENOSPC), "store: disk full (ENOSPC) writing its files; retry later")
}
