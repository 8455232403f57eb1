package api

import (
	"net/http"
	"strconv"
)

// LimitHeader is set on the answer of a listing (findings, writes, calls,
// a document's timeline) whose limit parameter was past the endpoint's
// maximum; its value is that maximum, which the page holds at most. A
// limit is clamped, not refused, by the stores' one clamping
// (store.PageLimit, store.TimelineLimit), and paging goes on from the page
// as from any other (next_cursor, or next_since for a timeline).
const LimitHeader = "Mcpaudit-Limit-Clamped"

// sayClamped sets LimitHeader on w when the limit asked is past max.
func sayClamped(w http.ResponseWriter, asked, max int) {
	if asked > max {
		w.Header().Set(LimitHeader, strconv.Itoa(max))
	}
}
