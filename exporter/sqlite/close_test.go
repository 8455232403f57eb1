package sqlite

import (
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"
)

// TestClose_CheckpointTick: Close while the checkpoint loop is about to
// sign returns. Close used to wait for the loop while holding the lock
// that the loop's checkpoint needs to be queued: a tick at that moment hung
// Close for good (found by TestRev16b_RetentionScale under load).
func TestClose_CheckpointTick(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mcpaudit.db")
	for i := range 30 {
		s, err := Open(path, Options{SigningKey: priv, CheckpointEvery: time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- s.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("open %d: Close hangs", i)
		}
	}
}
