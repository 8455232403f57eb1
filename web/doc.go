// Package web is the investigation page of mcpaudit serve: server-rendered
// HTML (html/template, a few lines of JavaScript, every asset embedded)
// on the API listener. It shows the findings newest first with filters and
// counts, a document's and a session's timeline with the evidence of each
// finding highlighted and raw payloads on demand, one finding with its
// evidence, its safe next step and its lifecycle (acknowledge, resolve,
// reopen), and the write-durability SLO. It reads through audit.Store and
// authenticates as the query API does.
package web
