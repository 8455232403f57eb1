// Package report computes the write-durability report: the SLI against its
// target and the error budget, bad events by cause, server, tool, client and
// document, findings by kind and lifecycle state, the retry-action mix of
// failures, the days of the window, the burn-down of the error budget; and
// renders it as one self-contained HTML file (inline CSS and SVG, no
// scripts, nothing fetched), Markdown or JSON. `mcpaudit report` prints it,
// the investigation page's /slo view shows it, and /api/v1/report serves it,
// so all three give the same numbers from the same store.
package report
