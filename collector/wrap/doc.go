// Package wrap runs an MCP server that speaks stdio as a child process,
// relays its standard input and output byte for byte, and records the
// tools/call exchanges that pass. Standard error is the child's own.
package wrap
