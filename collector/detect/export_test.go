package detect

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMain runs every test of the package with each watermark bound that
// an engine takes from its memo (boundMemo) computed again and compared:
// the package's delivery, slow-clock, restart and hold scenarios all
// check the memo. Benchmarks run without.
func TestMain(m *testing.M) {
	flag.Parse()
	var used, differ int
	var first string
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		memoCheck = func(k PartitionKey, wall time.Time, diff string) {
			used++
			if diff != "" {
				if differ++; differ == 1 {
					first = fmt.Sprintf("%v at %v: %s", k, wall, diff)
				}
			}
		}
	}
	// Every pending-write count a status takes is compared with a walk
	// of the windows, in every test of the package.
	var counted, miscounted int
	var firstMiscount string
	// Benchmarks run without (the walk is what the count saves).
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		pendingCheck = func(n, walkN int, until, walkUntil time.Time) {
			counted++
			if n != walkN || !until.Equal(walkUntil) {
				if miscounted++; miscounted == 1 {
					firstMiscount = fmt.Sprintf("kept %d until %v, walked %d until %v", n, until, walkN, walkUntil)
				}
			}
		}
	}
	code := m.Run()
	if miscounted > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d of %d pending-write counts differ from a walk of the windows; the first: %s\n", miscounted, counted, firstMiscount)
		code = 1
	} else if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "%d pending-write counts, each the same as a walk of the windows\n", counted)
	}
	if differ > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d of %d watermark bounds taken from a memo differ from the bound computed again; the first: %s\n", differ, used, first)
		code = 1
	} else if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "%d watermark bounds taken from a memo, each the same computed again\n", used)
	}
	os.Exit(code)
}

// SetPendingCheck makes f, beside the package's own check, see what every
// pending-write count of a status keeps and what a walk of the windows
// finds, until the returned function restores the check before.
func SetPendingCheck(f func(n, walkN int, until, walkUntil time.Time)) (restore func()) {
	prev := pendingCheck
	pendingCheck = func(n, walkN int, until, walkUntil time.Time) {
		if prev != nil {
			prev(n, walkN, until, walkUntil)
		}
		f(n, walkN, until, walkUntil)
	}
	return func() { pendingCheck = prev }
}
