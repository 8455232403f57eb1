// Package audit holds the domain types of mcpaudit: a normalized MCP tool
// call, the retry action of a failure, a write attempt and its state, and a
// finding. Every other package imports it; it imports nothing of ours.
package audit
