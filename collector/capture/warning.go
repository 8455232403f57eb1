package capture

import (
	"fmt"
	"strconv"
)

// Warning says what a kept call record held that was read leniently
// (docs/api.md, "Members read leniently"): a name given twice, or a member
// of the wrong type. The record is taken all the same: capture-format.md
// §1 rejects a record only when it is not JSON or lacks time, server or
// request.
type Warning struct {
	Source string // file name or "-"
	Line   int    // 1-based line (NDJSON) or element (JSON array)
	// Field is the member's path in the record: "request.id",
	// "request.params.arguments.path".
	Field string
	// Offset is the byte offset in the record of the member's name (a name
	// given twice: the copy read) or value (a wrong type); -1 when it is
	// not known.
	Offset int
	// Kind is what the warning is counted under in
	// mcpaudit_ingest_warnings_total: one of Warnings.
	Kind string
	// Reason says what was found and how it was read.
	Reason string
}

// The Kinds of a Warning, as exporter/metrics spells its WarnReasons
// (capture does not import it).
const (
	WarnDuplicateName      = "duplicate_name"
	WarnWrongTypeID        = "wrong_type_id"
	WarnWrongTypeMethod    = "wrong_type_method"
	WarnWrongTypeArguments = "wrong_type_arguments"
	WarnWrongTypeResult    = "wrong_type_result"
	WarnWrongTypeIsError   = "wrong_type_is_error"
)

// Warnings lists every Kind of a Warning.
var Warnings = []string{WarnDuplicateName, WarnWrongTypeID, WarnWrongTypeMethod, WarnWrongTypeArguments, WarnWrongTypeResult, WarnWrongTypeIsError}

func (w *Warning) Error() string {
	loc := w.Source
	if w.Line > 0 {
		loc += ":" + strconv.Itoa(w.Line)
	}
	at := ""
	if w.Offset >= 0 {
		at = " at byte offset " + strconv.Itoa(w.Offset)
	}
	return fmt.Sprintf("%s: field %s%s: %s", loc, w.Field, at, w.Reason)
}

// maxWarningsPerRecord bounds the warnings of one record: a record that
// names a thousand members twice is told by its first few.
const maxWarningsPerRecord = 8

// MaxWarningsShown bounds the warnings a Decoder keeps to be shown; all
// are counted (WarnCounts).
const MaxWarningsShown = 100

// warnings keeps what a Decoder says of its input: each field's first
// warning of each kind (once per field per input, up to MaxWarningsShown),
// and the count of every record warned, by kind.
type warnings struct {
	seen   map[string]bool
	shown  []Warning
	counts map[string]int
}

func (ws *warnings) add(w Warning) {
	if ws.counts == nil {
		ws.counts, ws.seen = map[string]int{}, map[string]bool{}
	}
	ws.counts[w.Kind]++
	key := w.Kind + "\x00" + w.Field
	if ws.seen[key] || len(ws.shown) >= MaxWarningsShown {
		return
	}
	ws.seen[key] = true
	ws.shown = append(ws.shown, w)
}
