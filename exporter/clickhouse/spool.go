package clickhouse

import (
	"bytes"
	"encoding/gob"
	"reflect"
	"slices"

	spoollog "github.com/mcpaudit/mcpaudit/internal/spool"
)

// The spool (package internal/spool) keeps acknowledged batches on local
// disk while ClickHouse is unreachable, and with Ack "log" every batch; the
// drain inserts them in order and forgets them once ClickHouse has them.
// This file holds what is ClickHouse's in it: the batch's encoding
// (spoolcodec.go), the gob of earlier releases, and the copy an insert may
// change.

var (
	errSpoolFull     = spoollog.ErrFull
	errSpoolTooLarge = spoollog.ErrTooLarge
	errSpoolCorrupt  = spoollog.ErrCorrupt
	errSpoolCodec    = spoollog.ErrCodec
)

type corruptError = spoollog.CorruptError

const (
	spoolExt     = spoollog.Ext
	spoolSegExt  = spoollog.SegExt
	spoolBadExt  = spoollog.BadExt
	spoolMagic   = spoollog.Magic
	spoolMagicV1 = spoollog.MagicV1
)

// spool is the ClickHouse store's spool of batches.
type spool struct {
	*spoollog.Log[*batch]
}

// openSpool opens the spool in dir; up to keepRows rows of the batches
// appended from now on are kept in memory for the drain.
func openSpool(dir string, maxBytes int64, keepRows int) (*spool, error) {
	l, err := spoollog.Open[*batch](dir, maxBytes, keepRows, batchCodec{})
	if err != nil {
		return nil, err
	}
	return &spool{l}, nil
}

func (sp *spool) append(b *batch) error                     { return sp.Append(b) }
func (sp *spool) first(n int) []uint64                      { return sp.First(n) }
func (sp *spool) decode(seq uint64) (*batch, error)         { return sp.Decode(seq) }
func (sp *spool) remove(seq uint64) error                   { return sp.Remove(seq) }
func (sp *spool) reject(seq uint64) (string, error)         { return sp.Reject(seq) }
func (sp *spool) setAside() (rejected, torn int, err error) { return sp.SetAside() }
func (sp *spool) usage() (int, int64)                       { return sp.Usage() }
func (sp *spool) lastAppended() uint64                      { return sp.LastAppended() }
func (sp *spool) doneThrough() uint64                       { return sp.DoneThrough() }
func (sp *spool) tried(seqs []uint64) bool                  { return sp.Tried(seqs) }
func (sp *spool) where(seq uint64) string                   { return sp.Where(seq) }
func (sp *spool) close()                                    { sp.Close() }
func (sp *spool) path(seq uint64, ext string) string        { return sp.Path(seq, ext) }
func (sp *spool) view(seq uint64) (*batch, bool, error)     { return sp.View(seq) }

// read returns the batch of seq for an insert, which may change it: a
// batch kept in memory comes back as its file would, a copy of the rows,
// token and acknowledged tables with nothing of an insert tried before it
// was spooled.
func (sp *spool) read(seq uint64) (*batch, error) {
	b, kept, err := sp.View(seq)
	if err != nil {
		return nil, err
	}
	return owned(b, kept), nil
}

// owned returns a batch from view that an insert may change: a batch
// decoded from its file is the caller's already; a kept one is copied, as
// inserts change rows in place (chain nonces, merges) and the kept batch
// must stay as spooled. The copy carries every table the file does
// (TestOwned_CopiesEveryField): it once left out TooLate, and a commit's
// calls too late drained alone from memory never reached too_late (tl24).
func owned(b *batch, kept bool) *batch {
	if !kept {
		return b
	}
	return &batch{
		Calls: slices.Clone(b.Calls), Writes: slices.Clone(b.Writes),
		Findings: slices.Clone(b.Findings), Watermarks: slices.Clone(b.Watermarks),
		TooLate: slices.Clone(b.TooLate),
		Token:   b.Token, Done: b.Done, spooled: true,
	}
}

// batchCodec is the spool's Codec of ClickHouse batches.
type batchCodec struct{}

var _ spoollog.Codec[*batch] = batchCodec{}

func (batchCodec) Size(b *batch) int                        { return encodedSize(b) }
func (batchCodec) Append(dst []byte, b *batch) []byte       { return appendBatch(dst, b) }
func (batchCodec) Rows(b *batch) int                        { return b.rows() }
func (batchCodec) DecodeLegacy(data []byte) (*batch, error) { return decodeGob(data) }

func (batchCodec) Decode(raw []byte) (*batch, error) {
	b, err := decodeBatch(raw)
	if err != nil {
		return nil, err
	}
	b.spooled = true
	return b, nil
}

// encodeFrame returns the frame of b (spoollog.EncodeFrame).
func encodeFrame(b *batch, limit int64) ([]byte, int, error) {
	return spoollog.EncodeFrame[*batch](batchCodec{}, b, limit)
}

// decodeFrame decodes a frame or a spool file of an earlier release.
func decodeFrame(data []byte, limit int64) (*batch, error) {
	return spoollog.DecodeFrame[*batch](batchCodec{}, data, limit)
}

func putSpoolBuf(b []byte) { spoollog.PutBuf(b) }

// Minimum encoded size of each row type: every field takes at least one
// byte (TestSpoolCodec_EveryField keeps every field encoded), so a count
// of rows larger than the bytes left over this is refused before the rows
// are allocated.
var (
	minCallBytes      = reflectNumField[callRow]()
	minWriteBytes     = reflectNumField[writeRow]()
	minFindingBytes   = reflectNumField[findingRow]()
	minWatermarkBytes = reflectNumField[watermarkRow]()
	minTooLateBytes   = reflectNumField[tooLateRow]()
)

func reflectNumField[T any]() int { return reflect.TypeFor[T]().NumField() }

// decodeGob decodes a file of the releases before version 1. gob bounds
// its own allocations by the bytes it has read.
func decodeGob(data []byte) (*batch, error) {
	r := bytes.NewReader(data)
	var g gobBatch
	if err := gob.NewDecoder(r).Decode(&g); err != nil {
		return nil, &corruptError{Offset: int64(len(data) - r.Len()), Reason: "cannot decode the gob of an earlier release: " + err.Error()}
	}
	b := &batch{Calls: g.Calls, Writes: g.Writes, Findings: g.Findings, Watermarks: g.Watermarks, Token: g.Token, spooled: true}
	copy(b.Done[:], g.Done[:])
	return b, nil
}

// gobBatch is a batch as the releases before version 1 wrote it, with the
// four tables it had then (gob refuses an array of another length).
type gobBatch struct {
	Calls      []callRow
	Writes     []writeRow
	Findings   []findingRow
	Watermarks []watermarkRow
	Token      string
	Done       [tTooLate]bool
}
