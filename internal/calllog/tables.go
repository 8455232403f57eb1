package calllog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
)

// sealedTables are a sealed segment's id table and document and session
// table, as its index file holds them.
type sealedTables struct {
	ids, keys table
}

func (t *sealedTables) bytes() int64 { return 12 * int64(len(t.ids.hashes)+len(t.keys.hashes)) }

// tableCache keeps the tables of the sealed segments used last, up to max
// bytes (the table in use always stays, however large). A lookup holds a
// table it was given after it is let go: eviction only forgets it.
type tableCache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	tick  uint64
	m     map[uint64]*tableEntry // by segment number
	loads int64                  // tables read from index files, for tests
}

type tableEntry struct {
	t    *sealedTables
	used uint64
}

func (c *tableCache) init(max int64) { c.max, c.m = max, map[uint64]*tableEntry{} }

// get returns the tables of sealed segment s, read from its index file
// when they are not loaded. The file is read without the cache's lock, so
// that the lookups finding their tables loaded do not wait for it; two
// lookups missing the same tables at once both read them, and the later
// takes the earlier's. The caller holds the log's mu, so that s stays.
func (c *tableCache) get(s *segment) (*sealedTables, error) {
	c.mu.Lock()
	c.tick++
	if e, ok := c.m[s.num]; ok {
		e.used = c.tick
		c.mu.Unlock()
		return e.t, nil
	}
	c.mu.Unlock()
	path := idxPath(s.path)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read call log index: %w", err)
	}
	blocks, ids, keys, why := decodeIndex(data)
	if why == "" && len(blocks) != len(s.blocks) {
		why = fmt.Sprintf("%d blocks, %d when the log was opened", len(blocks), len(s.blocks))
	}
	if why != "" {
		return nil, &CorruptError{Path: path, Reason: why}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loads++
	c.tick++
	if e, ok := c.m[s.num]; ok {
		e.used = c.tick
		return e.t, nil
	}
	t := &sealedTables{ids: ids, keys: keys}
	c.putLocked(s.num, t)
	return t, nil
}

// put keeps the tables t of segment num, just built.
func (c *tableCache) put(num uint64, t *sealedTables) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	c.putLocked(num, t)
}

func (c *tableCache) putLocked(num uint64, t *sealedTables) {
	if e, ok := c.m[num]; ok {
		c.bytes -= e.t.bytes()
	}
	c.m[num] = &tableEntry{t: t, used: c.tick}
	c.bytes += t.bytes()
	for c.bytes > c.max && len(c.m) > 1 {
		var old uint64
		var oldest *tableEntry
		for n, e := range c.m {
			if n != num && (oldest == nil || e.used < oldest.used) {
				old, oldest = n, e
			}
		}
		c.bytes -= oldest.t.bytes()
		delete(c.m, old)
	}
}

// size returns the bytes of the tables kept.
func (c *tableCache) size() int64 {
	c.mu.Lock()
	n := c.bytes
	c.mu.Unlock()
	return n
}

func (c *tableCache) drop(num uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[num]; ok {
		c.bytes -= e.t.bytes()
		delete(c.m, num)
	}
}

// readIndexHead reads the time index of an index file and checks the
// whole file's checksum, streaming it, without holding its tables: they
// are read when a lookup needs them (tableCache.get). why is non-empty
// when the file is damaged.
func readIndexHead(path string, buf []byte) (blocks []blockRef, why string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	size := fi.Size()
	if size < 24 {
		return nil, "not an index file", nil
	}
	// The checksum, over everything before the last 4 bytes.
	sum := uint32(0)
	r := io.NewSectionReader(f, 0, size-4)
	for {
		n, rerr := r.Read(buf)
		sum = crc32.Update(sum, castagnoli, buf[:n])
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, "", rerr
		}
	}
	var tail [4]byte
	if _, err := f.ReadAt(tail[:], size-4); err != nil {
		return nil, "", err
	}
	if sum != binary.LittleEndian.Uint32(tail[:]) {
		return nil, "checksum mismatch", nil
	}
	var h [16]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return nil, "", err
	}
	if string(h[:8]) != idxMagic {
		return nil, "not an index file", nil
	}
	nb, nc := int64(binary.LittleEndian.Uint32(h[8:])), int64(binary.LittleEndian.Uint32(h[12:]))
	keysAt := 16 + 32*nb + 12*nc
	if keysAt+4 > size-4 {
		return nil, fmt.Sprintf("%d blocks and %d calls pass %d bytes", nb, nc, size-4), nil
	}
	var k [4]byte
	if _, err := f.ReadAt(k[:], keysAt); err != nil {
		return nil, "", err
	}
	if nk := int64(binary.LittleEndian.Uint32(k[:])); keysAt+4+12*nk != size-4 {
		return nil, fmt.Sprintf("%d blocks, %d calls and %d keys do not fill %d bytes", nb, nc, nk, size-4), nil
	}
	p := make([]byte, 32*nb)
	if _, err := f.ReadAt(p, 16); err != nil {
		return nil, "", err
	}
	blocks = make([]blockRef, nb)
	for i := range blocks {
		blocks[i] = blockRef{off: int64(binary.LittleEndian.Uint64(p)), size: binary.LittleEndian.Uint32(p[8:]),
			count: binary.LittleEndian.Uint32(p[12:]), min: int64(binary.LittleEndian.Uint64(p[16:])), max: int64(binary.LittleEndian.Uint64(p[24:]))}
		p = p[32:]
	}
	return blocks, "", nil
}
