// Package proxy is a reverse proxy for MCP Streamable HTTP that records every
// tools/call exchange it relays as a call record.
//
// It passes every request and response through unchanged: POST with JSON or
// Server-Sent Events answers, GET streams, DELETE, every end-to-end header
// (Mcp-Session-Id among them) and the path and query as they are. SSE is
// streamed event by event, never buffered. A copy of each message goes to a
// tap.Recorder, which pairs requests with responses by session and id.
package proxy
