package sqlite

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestFull_SaysItOnce: a store whose file cannot grow (SQLite's own
// max_page_count, which fails a write with SQLITE_FULL, "database or disk
// is full", as a full disk does) refuses appends as unavailable, and the
// error says so once, naming the file and the setting to look at; before,
// it read "cannot append calls: store unavailable: store unavailable:
// database or disk is full (13)". Both acks: with "log" the drain's
// "cannot apply the call log" error is the same path (s.fail).
func TestFull_SaysItOnce(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	var pages int
	if err := s.w.QueryRow("PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec("PRAGMA max_page_count = " + strconv.Itoa(pages+2)); err != nil {
		t.Fatal(err)
	}
	recs := records(t, 2000)
	var err error
	for i := 0; i < len(recs) && err == nil; i += 100 {
		_, err = s.AppendCalls(t.Context(), recs[i:i+100])
	}
	if err == nil {
		t.Fatal("2000 calls fit a store held to 2 more pages")
	}
	msg := err.Error()
	if !errors.Is(err, audit.ErrUnavailable) || strings.Count(msg, audit.ErrUnavailable.Error()) != 1 ||
		strings.Count(msg, "database or disk is full") != 1 {
		t.Errorf("error %q: want unavailable, said once, and the cause once", msg)
	}
	if !strings.Contains(msg, s.path) || !strings.Contains(msg, "serve.data_dir") {
		t.Errorf("error %q: want the file (%s) and the setting to look at", msg, s.path)
	}
}
