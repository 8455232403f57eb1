package chain

import (
	"fmt"
	"io"
	"sort"
)

// Problem is one place where stored history does not match its chain or
// its signed checkpoints.
type Problem struct {
	Tenant string
	// Where names the place: a chain entry and its rows, a row, a
	// checkpoint.
	Where string
	// What says what is wrong there.
	What string
}

func (p Problem) String() string {
	return fmt.Sprintf("tenant %q: %s: %s", p.Tenant, p.Where, p.What)
}

// Report is what a verification found.
type Report struct {
	Problems []Problem
	// Notes are facts worth knowing that are not problems (an unsigned
	// tail, no public key given).
	Notes []string
	// What was checked.
	Tenants, Entries, Calls, Findings, Changes, Checkpoints int64
}

// Add records a problem.
func (r *Report) Add(tenant, where, format string, a ...any) {
	r.Problems = append(r.Problems, Problem{Tenant: tenant, Where: where, What: fmt.Sprintf(format, a...)})
}

// Note records a note.
func (r *Report) Note(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

// OK reports whether nothing is wrong.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Print writes the report for a person: what was checked, the notes, then
// every problem, one a line.
func (r *Report) Print(w io.Writer) {
	sort.SliceStable(r.Problems, func(i, j int) bool { return r.Problems[i].Tenant < r.Problems[j].Tenant })
	fmt.Fprintf(w, "checked %d tenants, %d chain entries, %d calls, %d findings, %d finding changes, %d checkpoints\n",
		r.Tenants, r.Entries, r.Calls, r.Findings, r.Changes, r.Checkpoints)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "TAMPERED: %s\n", p)
	}
	if r.OK() {
		fmt.Fprintln(w, "ok: stored history matches its chains")
	} else {
		fmt.Fprintf(w, "FAILED: %d problems\n", len(r.Problems))
	}
}
