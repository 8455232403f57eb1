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
	code := m.Run()
	if differ > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d of %d watermark bounds taken from a memo differ from the bound computed again; the first: %s\n", differ, used, first)
		code = 1
	} else if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "%d watermark bounds taken from a memo, each the same computed again\n", used)
	}
	os.Exit(code)
}
