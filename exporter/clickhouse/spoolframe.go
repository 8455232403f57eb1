package clickhouse

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"fmt"
	"hash/crc32"
	"math"
	"reflect"

	"github.com/klauspost/compress/s2"
)

// A spool file holds one batch in one frame:
//
//	bytes 0-6    spoolMagic, "\x00mcsp2\n": the frame's version
//	bytes 7-10   length of the S2 block, little endian; the block ends the file
//	bytes 11-14  CRC-32C (Castagnoli) of bytes 0-10 and of the block
//	bytes 15-    the batch in the spool's encoding (spoolcodec.go),
//	             compressed with S2 (block format)
//
// The checksum is verified before anything is decompressed, so a flipped
// bit is refused before a damaged length can size an allocation or a damaged
// row can reach ClickHouse. Every length read from a file is bounded: the
// file and the decoded batch by the spool's limit (spool.max_bytes, which
// the writer also holds them to), and every count inside it by the bytes
// left.
//
// Files of earlier releases are still read: version 1 ("\x00mcsp1\n" and
// the S2 block, no length and no checksum), and before it the bare gob of
// the batch, whose first byte (a message length) is never 0.
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

// Minimum encoded size of each row type: every field takes at least one
// byte (TestSpoolCodec_EveryField keeps every field encoded), so a count
// of rows larger than the bytes left over this is refused before the rows
// are allocated.
var (
	minCallBytes      = reflectNumField[callRow]()
	minWriteBytes     = reflectNumField[writeRow]()
	minFindingBytes   = reflectNumField[findingRow]()
	minWatermarkBytes = reflectNumField[watermarkRow]()
)

// corruptError is returned when a spool file cannot be trusted: it names
// the file, where the damage shows and what it is. It matches
// errSpoolCorrupt, and errSpoolCodec when the damage is inside the decoded
// batch.
type corruptError struct {
	path string
	// offset is the byte where the damage shows: in the file, or in the
	// decoded batch when inBatch is set (the file holds it compressed).
	offset  int64
	inBatch bool
	reason  string
}

func (e *corruptError) Error() string {
	where := "of the file"
	if e.inBatch {
		where = "of its decoded batch"
	}
	name := "a spool file"
	if e.path != "" {
		name = "spool file " + e.path
	}
	return fmt.Sprintf("cannot read %s: corrupt at byte %d %s: %s", name, e.offset, where, e.reason)
}

func (e *corruptError) Unwrap() []error {
	if e.inBatch {
		return []error{errSpoolCorrupt, errSpoolCodec}
	}
	return []error{errSpoolCorrupt}
}

// encodeFrame returns the bytes of b's spool file, in a buffer from
// spoolBufs (put it back when written), and the length of b's encoding. It
// refuses a batch whose encoding passes limit: a reader would refuse it.
func encodeFrame(b *batch, limit int64) (data []byte, rawLen int, err error) {
	raw := appendBatch(getSpoolBuf(encodedSize(b))[:0], b)
	defer putSpoolBuf(raw)
	if int64(len(raw)) > min(limit, maxFrameRaw) {
		return nil, len(raw), fmt.Errorf("cannot spool a batch of %d bytes encoded: more than the spool's limit of %d (spool.max_bytes): %w",
			len(raw), min(limit, maxFrameRaw), errSpoolFull)
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

// decodeFrame decodes the bytes of a spool file of any release. A damaged
// or unknown file is a *corruptError (without its path); limit bounds the
// decoded batch.
func decodeFrame(data []byte, limit int64) (*batch, error) {
	limit = min(limit, maxFrameRaw)
	bad := func(off int, format string, args ...any) error {
		return &corruptError{offset: int64(off), reason: fmt.Sprintf(format, args...)}
	}
	var block []byte
	blockAt := len(spoolMagic)
	switch {
	case len(data) == 0:
		// What a file system may leave of a file whose data never
		// reached the disk.
		return nil, bad(0, "the file is empty")
	case bytes.HasPrefix(data, []byte(spoolMagic)):
		if len(data) < frameHeaderLen {
			return nil, bad(len(data), "the file ends inside its %d-byte frame header", frameHeaderLen)
		}
		n := binary.LittleEndian.Uint32(data[frameLenAt:])
		if int64(n) != int64(len(data)-frameHeaderLen) {
			return nil, bad(frameLenAt, "the frame says its block has %d bytes, the file holds %d after the header", n, len(data)-frameHeaderLen)
		}
		block, blockAt = data[frameHeaderLen:], frameHeaderLen
		want := binary.LittleEndian.Uint32(data[frameSumAt:])
		got := crc32.Update(crc32.Checksum(data[:frameSumAt], castagnoli), castagnoli, block)
		if got != want {
			return nil, bad(frameSumAt, "checksum mismatch: the frame says %08x, its bytes sum to %08x", want, got)
		}
	case bytes.HasPrefix(data, []byte(spoolMagicV1)):
		block = data[len(spoolMagicV1):]
	case len(data) > 0 && data[0] == 0, bytes.HasPrefix(data[min(1, len(data)):], []byte(spoolMagicPrefix[1:])):
		// A gob stream never starts with 0, nor has "mcsp" after its
		// first byte: this is one of ours, its header damaged or newer.
		return nil, bad(0, "unknown header %q", data[:min(len(data), len(spoolMagic))])
	default:
		return decodeGob(data)
	}
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, bad(blockAt, "cannot read the S2 block's length: %v", err)
	}
	if int64(n) > limit {
		return nil, bad(blockAt, "the S2 block says it decodes to %d bytes, more than the spool's limit of %d (spool.max_bytes)", n, limit)
	}
	raw, err := s2.Decode(getSpoolBuf(n), block)
	if err != nil {
		return nil, bad(blockAt, "cannot decompress the S2 block: %v", err)
	}
	defer putSpoolBuf(raw)
	b, err := decodeBatch(raw)
	if err != nil {
		return nil, err
	}
	b.spooled = true
	return b, nil
}

// decodeGob decodes a file of the releases before version 1. gob bounds
// its own allocations by the bytes it has read.
func decodeGob(data []byte) (*batch, error) {
	r := bytes.NewReader(data)
	b := new(batch)
	if err := gob.NewDecoder(r).Decode(b); err != nil {
		return nil, &corruptError{offset: int64(len(data) - r.Len()), reason: "cannot decode the gob of an earlier release: " + err.Error()}
	}
	b.spooled = true
	return b, nil
}

func reflectNumField[T any]() int { return reflect.TypeFor[T]().NumField() }
