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
	if p.Tenant == "*" {
		// A checkpoint signs every tenant's chains: "*" is not a
		// tenant's name, and tenant "" (the default tenant) is one.
		return fmt.Sprintf("every tenant: %s: %s", p.Where, p.What)
	}
	return fmt.Sprintf("tenant %q: %s: %s", p.Tenant, p.Where, p.What)
}

// Report is what a verification found.
type Report struct {
	Problems []Problem
	// Notes are facts worth knowing that are not problems (an unsigned
	// tail, no public key given).
	Notes []string
	// UnsignedCuts are the retention cuts no checkpoint signed that
	// cannot be told from a removal by the file alone: made after the
	// last checkpoint, as serve makes them while it runs without its
	// signing key. Each is a note, or a problem when the verifier is told
	// that serve always ran with its key (Strict).
	UnsignedCuts []Problem
	// What was checked.
	Tenants, Entries, Calls, Findings, Changes, Checkpoints int64
}

// Add records a problem.
func (r *Report) Add(tenant, where, format string, a ...any) {
	r.Problems = append(r.Problems, Problem{Tenant: tenant, Where: where, What: fmt.Sprintf(format, a...)})
}

// Note records a note.
func (r *Report) Note(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

// UnsignedCut records a retention cut no checkpoint signed, made after
// the last checkpoint: a note, with its reason, and a problem for Strict.
func (r *Report) UnsignedCut(tenant, where, format string, a ...any) {
	p := Problem{Tenant: tenant, Where: where, What: fmt.Sprintf(format, a...)}
	r.UnsignedCuts = append(r.UnsignedCuts, p)
	r.Note("tenant %q: %s %s", tenant, where, p.What)
}

// Strict makes every unsigned cut a problem: for a verifier who knows that
// serve always ran with its signing key, so that a cut no checkpoint signed
// was not made by serve's retention (mcpaudit verify --key-always).
func (r *Report) Strict() {
	for _, p := range r.UnsignedCuts {
		r.Problems = append(r.Problems, Problem{Tenant: p.Tenant, Where: p.Where,
			What: "no checkpoint signed it, and serve always ran with its signing key (--key-always), so its retention would have: history was removed outside retention"})
	}
	r.UnsignedCuts = nil
}

// OK reports whether nothing is wrong.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Print writes the report for a person: what was checked, the notes, then
// every problem, one a line.
func (r *Report) Print(w io.Writer) {
	sort.SliceStable(r.Problems, func(i, j int) bool { return r.Problems[i].Tenant < r.Problems[j].Tenant })
	fmt.Fprintf(w, "checked %s, %s, %s, %s, %s, %s\n", Count(r.Tenants, "tenant", "tenants"),
		Count(r.Entries, "chain entry", "chain entries"), Count(r.Calls, "call", "calls"), Count(r.Findings, "finding", "findings"),
		Count(r.Changes, "finding change", "finding changes"), Count(r.Checkpoints, "checkpoint", "checkpoints"))
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "TAMPERED: %s\n", p)
	}
	if r.OK() {
		fmt.Fprintln(w, "ok: stored history matches its chains")
	} else {
		fmt.Fprintf(w, "FAILED: %s\n", Count(len(r.Problems), "problem", "problems"))
	}
}

// Count is n with its noun, singular for one: Count(1, "tenant",
// "tenants") is "1 tenant", Count(2, ...) "2 tenants".
func Count[N int | int64 | uint64](n N, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Span names the numbers first to last with their noun: "row 5" for one,
// "rows 5 to 7" for more.
func Span(one, many string, first, last int64) string {
	if first == last {
		return fmt.Sprintf("%s %d", one, first)
	}
	return fmt.Sprintf("%s %d to %d", many, first, last)
}

// MissingEntries says that the chain entries first to last are missing.
func MissingEntries(first, last int64) string {
	if first == last {
		return fmt.Sprintf("entry %d is missing from the chain", first)
	}
	return fmt.Sprintf("entries %d to %d are missing from the chain", first, last)
}

// UnsignedEntries says that the chain entries first to last were made
// after the last checkpoint. unverified counts the checkpoints whose
// signature no given key verified (reported as problems): the entries may
// be signed by one of them, by a key not given, so the note says that
// instead of "not signed yet" (out24's D4: verify with the first of two
// rotated keys called the second key's entries not signed yet).
func UnsignedEntries(first, last int64, unverified int) string {
	if unverified > 0 {
		return fmt.Sprintf("%s: no checkpoint that the given keys verify signs %s (%s did not verify, above: one of them may sign %s with a key not given)",
			Span("chain entry", "chain entries", first, last), pronoun(first, last), Count(unverified, "checkpoint", "checkpoints"), pronoun(first, last))
	}
	if first == last {
		return fmt.Sprintf("chain entry %d was made after the last checkpoint and is not signed yet", first)
	}
	return fmt.Sprintf("chain entries %d to %d were made after the last checkpoint and are not signed yet", first, last)
}

func pronoun(first, last int64) string {
	if first == last {
		return "it"
	}
	return "them"
}
