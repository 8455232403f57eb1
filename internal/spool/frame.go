package spool

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/klauspost/compress/s2"
)

// A spool file holds one batch in one frame:
//
//	bytes 0-6    spoolMagic, "\x00mcsp2\n": the frame's version
//	bytes 7-10   length of the S2 block, little endian; the block ends the file
//	bytes 11-14  CRC-32C (Castagnoli) of bytes 0-10 and of the block
//	bytes 15-    the batch in its store's encoding (Codec),
//	             compressed with S2 (block format)
//
// The checksum is verified before anything is decompressed, so a flipped
// bit is refused before a damaged length can size an allocation or a damaged
// row can reach the store. Every length read from a file is bounded: the
// file and the decoded batch by the spool's limit (spool.max_bytes, which
// the writer also holds them to), and every count inside it by the bytes
// left.
//
// Files of earlier releases are still read: version 1 ("\x00mcsp1\n" and
// the S2 block, no length and no checksum), and before it whatever the
// store's Codec.DecodeLegacy reads (the ClickHouse store's bare gob of the
// batch, whose first byte, a message length, is never 0).
const (
	spoolMagic       = "\x00mcsp2\n"
	spoolMagicV1     = "\x00mcsp1\n"
	frameLenAt       = len(spoolMagic)
	frameSumAt       = frameLenAt + 4
	frameHeaderLen   = frameSumAt + 4
	spoolMagicPrefix = "\x00mcsp"
	// maxFrameRaw bounds a batch's encoding whatever spool.max_bytes says,
	// so that every length fits the frame's 32 bits.
	maxFrameRaw = math.MaxInt32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CorruptError is returned when a spool file cannot be trusted: it names
// the file, where the damage shows and what it is. It matches ErrCorrupt,
// and ErrCodec when the damage is inside the decoded batch.
type CorruptError struct {
	Path string
	// Offset is the byte where the damage shows: in the file, or in the
	// decoded batch when InBatch is set (the file holds it compressed).
	Offset  int64
	InBatch bool
	Reason  string
}

func (e *CorruptError) Error() string {
	where := "of the file"
	if e.InBatch {
		where = "of its decoded batch"
	}
	name := "a spool file"
	if e.Path != "" {
		name = "spool file " + e.Path
	}
	return fmt.Sprintf("cannot read %s: corrupt at byte %d %s: %s", name, e.Offset, where, e.Reason)
}

func (e *CorruptError) Unwrap() []error {
	if e.InBatch {
		return []error{ErrCorrupt, ErrCodec}
	}
	return []error{ErrCorrupt}
}

// EncodeFrame returns the bytes of b's spool file, in a buffer from
// spoolBufs (PutBuf it back when written), and the length of b's encoding.
// It refuses a batch whose encoding passes limit (ErrTooLarge): a reader
// would refuse it.
func EncodeFrame[T any](c Codec[T], b T, limit int64) (data []byte, rawLen int, err error) {
	raw := c.Append(getSpoolBuf(c.Size(b))[:0], b)
	defer putSpoolBuf(raw)
	if int64(len(raw)) > min(limit, maxFrameRaw) {
		return nil, len(raw), fmt.Errorf("cannot spool a batch of %d bytes encoded: more than the spool's limit of %d: %w",
			len(raw), min(limit, maxFrameRaw), ErrTooLarge)
	}
	// Compressed, a batch is about a fifth of its bytes: what the
	// acknowledgement waits for is mostly writing and syncing them.
	out := getSpoolBuf(frameHeaderLen + s2.MaxEncodedLen(len(raw)))
	block := s2.Encode(out[frameHeaderLen:], raw)
	copy(out, spoolMagic)
	binary.LittleEndian.PutUint32(out[frameLenAt:], uint32(len(block)))
	sum := crc32.Update(crc32.Checksum(out[:frameSumAt], castagnoli), castagnoli, block)
	binary.LittleEndian.PutUint32(out[frameSumAt:], sum)
	return out[:frameHeaderLen+len(block)], len(raw), nil
}

// DecodeFrame decodes the bytes of a spool file of any release. A damaged
// or unknown file is a *CorruptError (without its path); limit bounds the
// decoded batch.
func DecodeFrame[T any](c Codec[T], data []byte, limit int64) (T, error) {
	var zero T
	limit = min(limit, maxFrameRaw)
	bad := func(off int, format string, args ...any) (T, error) {
		return zero, &CorruptError{Offset: int64(off), Reason: fmt.Sprintf(format, args...)}
	}
	var block []byte
	blockAt := len(spoolMagic)
	switch {
	case len(data) == 0:
		// What a file system may leave of a file whose data never
		// reached the disk.
		return bad(0, "the file is empty")
	case bytes.HasPrefix(data, []byte(spoolMagic)):
		if len(data) < frameHeaderLen {
			return bad(len(data), "the file ends inside its %d-byte frame header", frameHeaderLen)
		}
		n := binary.LittleEndian.Uint32(data[frameLenAt:])
		if int64(n) != int64(len(data)-frameHeaderLen) {
			return bad(frameLenAt, "the frame says its block has %d bytes, the file holds %d after the header", n, len(data)-frameHeaderLen)
		}
		block, blockAt = data[frameHeaderLen:], frameHeaderLen
		want := binary.LittleEndian.Uint32(data[frameSumAt:])
		got := crc32.Update(crc32.Checksum(data[:frameSumAt], castagnoli), castagnoli, block)
		if got != want {
			return bad(frameSumAt, "checksum mismatch: the frame says %08x, its bytes sum to %08x", want, got)
		}
	case bytes.HasPrefix(data, []byte(spoolMagicV1)):
		block = data[len(spoolMagicV1):]
	case len(data) > 0 && data[0] == 0, bytes.HasPrefix(data[min(1, len(data)):], []byte(spoolMagicPrefix[1:])):
		// A gob stream never starts with 0, nor has "mcsp" after its
		// first byte: this is one of ours, its header damaged or newer.
		return bad(0, "unknown header %q", data[:min(len(data), len(spoolMagic))])
	default:
		return c.DecodeLegacy(data)
	}
	n, err := s2.DecodedLen(block)
	if err != nil {
		return bad(blockAt, "cannot read the S2 block's length: %v", err)
	}
	if int64(n) > limit {
		return bad(blockAt, "the S2 block says it decodes to %d bytes, more than the spool's limit of %d", n, limit)
	}
	raw, err := s2.Decode(getSpoolBuf(n), block)
	if err != nil {
		return bad(blockAt, "cannot decompress the S2 block: %v", err)
	}
	defer putSpoolBuf(raw)
	return c.Decode(raw)
}
