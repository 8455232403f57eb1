// Package forward ships call records to a collector's POST /v1/calls.
//
// Every record is first appended to a segment file in a buffer directory:
// once Add returns, the record survives the collector being down and the
// forwarder being restarted. Segments are sealed by size or age and sent
// oldest first, one POST each, gzip-compressed, with the Mcpaudit-Source
// header naming the sender and an optional bearer token. A 2xx deletes the
// segment; 429, 5xx and transport errors are retried with exponential
// backoff and jitter, honouring Retry-After; any other 4xx sets the segment
// aside in rejected/ for an operator. The buffer is bounded: past its size
// new records are refused and counted, and nothing already buffered is
// dropped.
//
// Several processes may share one buffer directory (stdio wrappers of the
// same server): each writes its own segments, and a segment is sent by
// whichever process locks it first, so the segments of a process that died
// are sent by the next one.
package forward
