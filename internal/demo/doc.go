// Package demo holds simulated Thegram and Oddlynew MCP servers, built with
// the official MCP go-sdk over real in-memory state, and demo agents that
// use them the way the servers' documents prescribe or make each documented
// mistake.
//
// The servers implement the write semantics of the two reference documents:
// Thegram's CAS on base_revision and expected_hash, request_id replay and
// E_REQUEST_REUSE, COMMIT_UNKNOWN, sync states and error codes; Oddlynew's
// run envelope (a real JavaScript engine runs the code against provider
// namespaces), ledgers and outcomes, creationId replay, writeBasis CAS,
// copy plans and receipts, writeConfirmed and journal_corrupt. Faults are
// off unless asked for: then a fraction of writes time out before or after
// applying, lose their response, or answer COMMIT_UNKNOWN or
// in_flight_unknown, and every injected fault is journaled.
package demo
