// Package dialect reads what a tool call means for each audited server:
// which operations it carries (reads, writes, copy plans), their targets and
// idempotency keys, their intents, and what the response says about them.
package dialect

import (
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/canon"
)

// Dialect names.
const (
	Thegram  = "thegram"
	Oddlynew = "oddlynew"
	Generic  = "generic"
)

// WriteTool names a write tool of a generic server and where its target
// and key are.
type WriteTool struct {
	// TargetArg is the argument holding the document.
	TargetArg string `yaml:"target_arg"`
	// KeyArg is the argument holding the idempotency key, if any.
	KeyArg string `yaml:"key_arg"`
}

// Config chooses the dialect of each server.
type Config struct {
	// Servers maps a server name to its dialect. Names not listed use the
	// built-in default: names starting with thegram or oddlynew get those
	// dialects, every other name the generic one.
	Servers map[string]string `yaml:"servers"`
	// Writes names the write tools of generic servers: server → tool → where
	// its target and key are.
	Writes map[string]map[string]WriteTool `yaml:"writes"`
}

// Validate checks dialect names.
func (c *Config) Validate() error {
	for name, d := range c.Servers {
		switch d {
		case Thegram, Oddlynew, Generic:
		default:
			return &ConfigError{Path: "servers." + name, Reason: "unknown dialect " + d + " (want thegram, oddlynew or generic)"}
		}
	}
	for server, tools := range c.Writes {
		for tool, w := range tools {
			if w.TargetArg == "" {
				return &ConfigError{Path: "writes." + server + "." + tool + ".target_arg", Reason: "required"}
			}
		}
	}
	return nil
}

// ConfigError names the key path of an invalid setting.
type ConfigError struct {
	Path   string
	Reason string
}

func (e *ConfigError) Error() string { return e.Path + ": " + e.Reason }

// Of returns the dialect of a server name.
func (c *Config) Of(server string) string {
	if d, ok := c.Servers[server]; ok {
		return d
	}
	switch {
	case strings.HasPrefix(server, Thegram):
		return Thegram
	case strings.HasPrefix(server, Oddlynew):
		return Oddlynew
	}
	return Generic
}

// Reader reads calls. It is not safe for concurrent use: it reuses its
// parsers and scratch space from one call to the next.
type Reader struct {
	cfg Config
	p   parsers
}

// NewReader returns a Reader for cfg.
func NewReader(cfg Config) *Reader { return &Reader{cfg: cfg} }

// Read reads one call into a record. The record keeps c and shares none of
// the reader's scratch space.
func (r *Reader) Read(c *audit.Call) *audit.Record {
	var rec *audit.Record
	switch d := r.cfg.Of(c.Server); d {
	case Thegram:
		rec = r.thegram(c)
	case Oddlynew:
		rec = r.oddlynew(c)
	default:
		rec = r.generic(c, r.cfg.Writes[c.Server])
	}
	rec.Call = c
	if f := rec.Failure; f != nil && (f.Action == audit.ActionFixInput || f.Action == audit.ActionReauthorize) {
		rec.RequestHash = canon.Hash([]byte(c.Tool), canon.Bytes(c.Arguments))
	}
	return rec
}

// label returns the bounded tool label of a call: its tool when known.
func label(known bool, tool string) string {
	if known {
		return tool
	}
	return "other"
}

// KnownTool reports whether tool is a tool of the dialect; metrics label
// other tools "other".
func KnownTool(dialect, tool string) bool {
	switch dialect {
	case Thegram:
		return strings.HasPrefix(tool, "gram_")
	case Oddlynew:
		return tool == "run" || tool == "guide"
	}
	return false
}

// outcome returns the wire outcome of a call.
func outcome(c *audit.Call, isError bool) audit.Outcome {
	switch {
	case !c.Responded:
		return audit.OutcomeNoResponse
	case c.Error != nil:
		return audit.OutcomeProtocolError
	case isError:
		return audit.OutcomeToolError
	}
	return audit.OutcomeOK
}
