package calllog

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"slices"

	"github.com/klauspost/compress/zstd"
	"github.com/mcpaudit/mcpaudit/audit"
)

// A segment file, NNNNNNNNNNNNNNNNNNNN.seg (its number, which orders the
// segments), is a header and then blocks, one a group commit. The header is
// segMagic2 and the segment's creation time, unix nanoseconds, little
// endian (segHeadLen bytes, written and synced before any block): the
// segment's age counts from it, across opens. A segment written before
// seal52 has segMagic alone (8 bytes), no time. A block is:
//
//	bytes 0-3    blockMagic
//	bytes 4-7    length of the compressed body, little endian
//	bytes 8-11   length of the body decoded
//	bytes 12-15  number of calls
//	bytes 16-23  earliest call time, unix nanoseconds (math.MinInt64: zero)
//	bytes 24-31  latest call time
//	byte  32     codec of the body (codecZstd)
//	bytes 33-36  CRC-32C (Castagnoli) of bytes 0-32 and of the body
//	bytes 37-    the body, compressed
//
// The body holds its calls in time order, column by column: every id
// (idPacked and its 10 bytes for a stable id, "c_" and 20 lowercase hex
// digits; else idText, a uvarint length and the bytes), every time as a
// uvarint of its distance from the block's earliest, then every record as
// a uvarint length and what exporter/sqlite.AppendRecord wrote.
//
// The checksum is verified before anything is decompressed, and the body's
// decoded length is bounded (maxBlockRaw) before it is allocated.
const (
	segMagic      = "\x00mccl1\n\x00"
	segMagic2     = "\x00mccl2\n\x00"
	segHeadLen    = 16 // segMagic2 and the creation time
	blockMagic    = "CLB1"
	blockHeadLen  = 37
	blockSumAt    = 33
	codecZstd     = 1
	idText        = 0
	idPacked      = 1
	stableIDHex   = 20
	maxBlockRaw   = 1 << 30
	segExt        = ".seg"
	idxExt        = ".idx"
	tmpExt        = ".tmp"
	segNameDigits = 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors returned by the log.
var (
	// ErrCorrupt is matched by the error of Open when a segment or its
	// index is damaged where acknowledged calls follow (not a torn tail),
	// and of a read whose block fails its checksum.
	ErrCorrupt = errors.New("corrupt call log")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("call log closed")
	// ErrTenant is returned by Append when a call names another tenant
	// than the log's.
	ErrTenant = errors.New("call of another tenant")
	// ErrTooLarge is returned by Append when the records of one append
	// pass what one block may hold (512 MiB encoded).
	ErrTooLarge = errors.New("calls too large for one block")
	// ErrTime is returned by Append when a call's time cannot be stored
	// (outside the years 1678-2262).
	ErrTime = errors.New("call time out of range")
	// ErrReadOnly is returned by Append and DeleteBefore of a log opened
	// with Options.ReadOnly.
	ErrReadOnly = errors.New("call log opened read-only")
	// ErrNotStarted is returned by Append and DeleteBefore of a log
	// opened with Options.Defer before its Start.
	ErrNotStarted = errors.New("call log not started")
	// ErrNoSegment is returned by BlockHashes for a segment the log does
	// not hold.
	ErrNoSegment = errors.New("no such call log segment")
)

// CorruptError says where a segment or an index is damaged. It matches
// ErrCorrupt.
type CorruptError struct {
	Path   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("cannot read %s: corrupt at byte %d: %s", e.Path, e.Offset, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// entry is one call of a block: its id, time and encoded record.
type entry struct {
	id   string
	time int64
	rec  []byte
	// keys are the hashes of the call's documents and session
	// (recordKeys), set when it is appended or recovered.
	keys []uint64
}

// block is a decoded block: its calls in time order.
type block struct {
	entries []entry
	// size is the memory it holds: the body decoded (each call's record
	// points into it) and entryBytes a call.
	size int64
}

// entryBytes is what an entry of a decoded block holds besides its
// record: the entry and its id.
const entryBytes = 96

// blockRef places a block in its segment: what the time index holds.
type blockRef struct {
	off      int64
	size     uint32 // header and body
	count    uint32
	min, max int64
}

// idHash is the 64-bit hash under which a call id is looked up; a match is
// checked against the block's ids, so a collision costs a read, never a
// call.
func idHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// Key kinds: a document's key and a session's are hashed apart, so that a
// session named like a document is not found under it.
const (
	keyDocument = 'd'
	keySession  = 's'
)

// keyHash is the 64-bit hash under which the calls of a document or
// session are looked up; a match is checked against the calls' records.
func keyHash(kind byte, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte{kind})
	h.Write([]byte(name))
	return h.Sum64()
}

// recordKeys returns the key hashes of r: its documents and its session.
func recordKeys(r *audit.Record) []uint64 {
	return appendRecordKeys(make([]uint64, 0, len(r.Documents())+1), r)
}

// appendRecordKeys appends the key hashes of r to keys.
func appendRecordKeys(keys []uint64, r *audit.Record) []uint64 {
	for _, d := range r.Documents() {
		keys = append(keys, keyHash(keyDocument, d))
	}
	if r.Call.Session != "" {
		keys = append(keys, keyHash(keySession, r.Call.Session))
	}
	return keys
}

func isStableID(id string) bool {
	if len(id) != 2+stableIDHex || id[:2] != "c_" {
		return false
	}
	for i := 2; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// encoder compresses blocks; it is used by the committer alone.
type encoder struct {
	z   *zstd.Encoder
	raw []byte
	out []byte
}

func newEncoder(level zstd.EncoderLevel) *encoder {
	z, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
	if err != nil {
		panic(err) // only for invalid options, which are constant here
	}
	return &encoder{z: z}
}

// encode returns the bytes of a block of es, sorted by time, valid until
// the next call; min and max are its time range.
func (e *encoder) encode(es []entry) (data []byte, min, max int64) {
	min, max = es[0].time, es[0].time
	for _, x := range es {
		min, max = minInt(min, x.time), maxInt(max, x.time)
	}
	b := e.raw[:0]
	for _, x := range es {
		if isStableID(x.id) {
			b = append(b, idPacked)
			b, _ = hex.AppendDecode(b, []byte(x.id[2:])) // checked by isStableID
			continue
		}
		b = append(b, idText)
		b = binary.AppendUvarint(b, uint64(len(x.id)))
		b = append(b, x.id...)
	}
	for _, x := range es {
		b = binary.AppendUvarint(b, uint64(x.time-min))
	}
	for _, x := range es {
		b = binary.AppendUvarint(b, uint64(len(x.rec)))
		b = append(b, x.rec...)
	}
	e.raw = b
	out := append(e.out[:0], make([]byte, blockHeadLen)...)
	out = e.z.EncodeAll(b, out)
	copy(out, blockMagic)
	binary.LittleEndian.PutUint32(out[4:], uint32(len(out)-blockHeadLen))
	binary.LittleEndian.PutUint32(out[8:], uint32(len(b)))
	binary.LittleEndian.PutUint32(out[12:], uint32(len(es)))
	binary.LittleEndian.PutUint64(out[16:], uint64(min))
	binary.LittleEndian.PutUint64(out[24:], uint64(max))
	out[32] = codecZstd
	sum := crc32.Update(crc32.Checksum(out[:blockSumAt], castagnoli), castagnoli, out[blockHeadLen:])
	binary.LittleEndian.PutUint32(out[blockSumAt:], sum)
	e.out = out
	return out, min, max
}

// head is a block's header, read and checked.
type head struct {
	bodyLen, rawLen, count uint32
	min, max               int64
}

// readHead checks the header at the start of b (which holds at least
// blockHeadLen bytes) without the body; the reason is empty when it is
// whole.
func readHead(b []byte) (head, string) {
	if !bytes.Equal(b[:4], []byte(blockMagic)) {
		return head{}, fmt.Sprintf("no block starts here (%q)", b[:4])
	}
	h := head{
		bodyLen: binary.LittleEndian.Uint32(b[4:]),
		rawLen:  binary.LittleEndian.Uint32(b[8:]),
		count:   binary.LittleEndian.Uint32(b[12:]),
		min:     int64(binary.LittleEndian.Uint64(b[16:])),
		max:     int64(binary.LittleEndian.Uint64(b[24:])),
	}
	return h, ""
}

// checkBlock verifies the block whose header starts b, b holding at least
// the whole block, and returns its header; the reason is empty when it is
// whole.
func checkBlock(b []byte) (head, string) {
	h, why := readHead(b)
	if why != "" {
		return h, why
	}
	if int64(h.bodyLen) > int64(len(b)-blockHeadLen) {
		return h, fmt.Sprintf("the block says its body has %d bytes, %d follow", h.bodyLen, len(b)-blockHeadLen)
	}
	want := binary.LittleEndian.Uint32(b[blockSumAt:])
	got := crc32.Update(crc32.Checksum(b[:blockSumAt], castagnoli), castagnoli, b[blockHeadLen:blockHeadLen+int(h.bodyLen)])
	if got != want {
		return h, fmt.Sprintf("checksum mismatch: the block says %08x, its bytes sum to %08x", want, got)
	}
	if b[32] != codecZstd {
		return h, fmt.Sprintf("unknown codec %d", b[32])
	}
	if h.rawLen > maxBlockRaw || h.count == 0 || h.min > h.max {
		return h, fmt.Sprintf("impossible header: %d calls, %d bytes decoded, times %d-%d", h.count, h.rawLen, h.min, h.max)
	}
	return h, ""
}

var decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxBlockRaw))

// decodeBlock decodes a checked block (checkBlock) of b; the entries'
// records are views of one new buffer.
func decodeBlock(b []byte, h head) (*block, error) {
	raw, err := decoder.DecodeAll(b[blockHeadLen:blockHeadLen+int(h.bodyLen)], make([]byte, 0, h.rawLen))
	if err != nil {
		return nil, fmt.Errorf("cannot decompress the block: %w", err)
	}
	if len(raw) != int(h.rawLen) {
		return nil, fmt.Errorf("the block decodes to %d bytes, its header says %d", len(raw), h.rawLen)
	}
	bad := errors.New("the block's body ends early")
	es := make([]entry, h.count)
	p := raw
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	take := func(n uint64) ([]byte, bool) {
		if n > uint64(len(p)) {
			return nil, false
		}
		v := p[:n:n]
		p = p[n:]
		return v, true
	}
	for i := range es {
		if len(p) == 0 {
			return nil, bad
		}
		tag := p[0]
		p = p[1:]
		switch tag {
		case idPacked:
			v, ok := take(stableIDHex / 2)
			if !ok {
				return nil, bad
			}
			es[i].id = "c_" + hex.EncodeToString(v)
		case idText:
			n, ok := uv()
			v, ok2 := take(n)
			if !ok || !ok2 {
				return nil, bad
			}
			es[i].id = string(v)
		default:
			return nil, fmt.Errorf("unknown id tag %d", tag)
		}
	}
	for i := range es {
		d, ok := uv()
		if !ok {
			return nil, bad
		}
		es[i].time = h.min + int64(d)
	}
	for i := range es {
		n, ok := uv()
		v, ok2 := take(n)
		if !ok || !ok2 {
			return nil, bad
		}
		es[i].rec = v
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d bytes after the block's last call", len(p))
	}
	return &block{entries: es, size: int64(cap(raw)) + entryBytes*int64(len(es))}, nil
}

func minInt(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// An index file, NNNN.idx beside its sealed segment, is written once when
// the segment is sealed (datadir.WriteFileSynced: a temporary file
// .NNNN.idx.RANDOM.tmp, synced, renamed, the directory synced):
//
//	bytes 0-7    idxMagic
//	bytes 8-11   number of blocks B; bytes 12-15 number of calls N
//	then B × 32  the time index: each block's offset (8), size (4),
//	             calls (4), earliest and latest time (8 + 8)
//	then N × 12  the id table: each call's idHash (8) and block number
//	             (4), sorted by hash then block
//	then 4       number of keys K
//	then K × 12  the document and session table: a keyHash (8) and a
//	             block holding a call of it (4), once a block, sorted
//	last 4       CRC-32C of everything before
const idxMagic = "mcclidx1"

// table is a sorted table of hashes and the blocks they are in.
type table struct {
	hashes  []uint64
	blockOf []uint32
}

// find appends the blocks of hash h to out.
func (t *table) find(h uint64, out []uint32) []uint32 {
	i, _ := slices.BinarySearch(t.hashes, h)
	for ; i < len(t.hashes) && t.hashes[i] == h; i++ {
		out = append(out, t.blockOf[i])
	}
	return out
}

func encodeIndex(blocks []blockRef, ids, keys table) []byte {
	hashes, blockOf := ids.hashes, ids.blockOf
	b := make([]byte, 0, 20+32*len(blocks)+12*(len(hashes)+len(keys.hashes))+4)
	b = append(b, idxMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(blocks)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(hashes)))
	for _, r := range blocks {
		b = binary.LittleEndian.AppendUint64(b, uint64(r.off))
		b = binary.LittleEndian.AppendUint32(b, r.size)
		b = binary.LittleEndian.AppendUint32(b, r.count)
		b = binary.LittleEndian.AppendUint64(b, uint64(r.min))
		b = binary.LittleEndian.AppendUint64(b, uint64(r.max))
	}
	for i, h := range hashes {
		b = binary.LittleEndian.AppendUint64(b, h)
		b = binary.LittleEndian.AppendUint32(b, blockOf[i])
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(keys.hashes)))
	for i, h := range keys.hashes {
		b = binary.LittleEndian.AppendUint64(b, h)
		b = binary.LittleEndian.AppendUint32(b, keys.blockOf[i])
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeIndex(b []byte) (blocks []blockRef, ids, keys table, why string) {
	if len(b) < 24 || string(b[:8]) != idxMagic {
		return nil, ids, keys, "not an index file"
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, ids, keys, "checksum mismatch"
	}
	nb, nc := int64(binary.LittleEndian.Uint32(b[8:])), int64(binary.LittleEndian.Uint32(b[12:]))
	keysAt := 16 + 32*nb + 12*nc
	if keysAt+4 > int64(len(body)) {
		return nil, ids, keys, fmt.Sprintf("%d blocks and %d calls pass %d bytes", nb, nc, len(body))
	}
	nk := int64(binary.LittleEndian.Uint32(body[keysAt:]))
	if keysAt+4+12*nk != int64(len(body)) {
		return nil, ids, keys, fmt.Sprintf("%d blocks, %d calls and %d keys do not fill %d bytes", nb, nc, nk, len(body))
	}
	p := body[16:]
	blocks = make([]blockRef, nb)
	for i := range blocks {
		blocks[i] = blockRef{off: int64(binary.LittleEndian.Uint64(p)), size: binary.LittleEndian.Uint32(p[8:]),
			count: binary.LittleEndian.Uint32(p[12:]), min: int64(binary.LittleEndian.Uint64(p[16:])), max: int64(binary.LittleEndian.Uint64(p[24:]))}
		p = p[32:]
	}
	read := func(n int64, what string) (table, string) {
		t := table{make([]uint64, n), make([]uint32, n)}
		for i := range t.hashes {
			t.hashes[i], t.blockOf[i] = binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint32(p[8:])
			if t.blockOf[i] >= uint32(nb) {
				return t, fmt.Sprintf("%s %d in block %d of %d", what, i, t.blockOf[i], nb)
			}
			p = p[12:]
		}
		return t, ""
	}
	if ids, why = read(nc, "call"); why != "" {
		return nil, ids, keys, why
	}
	p = p[4:]
	if keys, why = read(nk, "key"); why != "" {
		return nil, ids, keys, why
	}
	return blocks, ids, keys, ""
}
