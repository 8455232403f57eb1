package capgen

import (
	"strconv"
	"time"
)

// The payloads are written as JSON directly, with sorted keys and no
// white space (the canonical form most encoders produce), rather than built
// as maps and marshalled: a load generator that spends its CPU on
// reflection takes it from the server it measures on a shared machine.

// appendStr appends s as a JSON string.
func appendStr(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, `\u00`...)
			b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendKey appends "key": after a comma unless it opens an object.
func appendKey(b []byte, key string) []byte {
	if n := len(b); n > 0 && b[n-1] != '{' && b[n-1] != '[' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

func appendKeyStr(b []byte, key, v string) []byte { return appendStr(appendKey(b, key), v) }

func appendKeyInt(b []byte, key string, v int) []byte {
	return strconv.AppendInt(appendKey(b, key), int64(v), 10)
}

func appendKeyBool(b []byte, key string, v bool) []byte {
	return strconv.AppendBool(appendKey(b, key), v)
}

// AppendRecord appends c as one NDJSON call record (capture-format.md),
// without the newline. A bad line is appended as it is.
func (c *Call) AppendRecord(b []byte) []byte {
	if c.Kind == KindBad {
		return append(b, badLines[c.bad].text...)
	}
	b = append(b, '{')
	b = appendKeyInt(b, "duration_ms", int(c.Duration/time.Millisecond))
	b = append(appendKey(b, "request"), `{"id":`...)
	b = strconv.AppendInt(b, int64(c.RPCID), 10)
	b = append(b, `,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":`...)
	b = append(b, c.Arguments...)
	b = appendKeyStr(b, "name", c.Tool)
	b = append(b, "}}"...)
	if c.Result != "" {
		b = append(appendKey(b, "response"), `{"id":`...)
		b = strconv.AppendInt(b, int64(c.RPCID), 10)
		b = append(b, `,"jsonrpc":"2.0","result":`...)
		b = append(b, c.Result...)
		b = append(b, '}')
	}
	b = appendKeyStr(b, "server", c.Server)
	b = appendKeyStr(b, "session", c.Session)
	if c.Tenant != "" {
		b = appendKeyStr(b, "tenant", c.Tenant)
	}
	b = append(appendKey(b, "time"), '"')
	b = c.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if c.TransportError != "" {
		b = appendKeyStr(b, "transport_error", c.TransportError)
	}
	return append(b, '}')
}
