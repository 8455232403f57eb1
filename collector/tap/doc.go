// Package tap turns the MCP traffic a proxy or a stdio wrapper relays into
// call records (capture-format.md §1).
//
// It never changes the traffic: the relays hand it copies of the bytes they
// pass on. It splits JSON-RPC messages and batches, frames Server-Sent Events
// and newline-delimited stdio, pairs each tools/call request with its
// response by JSON-RPC id within its session, and emits one Record per
// exchange: with the response, or with a transport error when the upstream
// timed out or failed or the client went away. Requests and responses of
// other methods, notifications and server-to-client requests pass through
// it and are not recorded; a client's notifications/cancelled ends the
// request it names as "canceled".
package tap
