package detect

import "hash/maphash"

// recentIDsKept is how many call ids the engine remembers to drop a call
// taken again.
const recentIDsKept = 200_000

// recentIDsBlock is how many ids one block of recentIDs holds: about
// 48 KiB with its index, so that the block being filled stays in cache.
const recentIDsBlock = 4096

// recentIDs remembers the last ids taken, first in first out, by a 64-bit
// hash of each (a collision, one in 2^64 per pair, would drop a call).
//
// Every call of analyze passes here. One hash table of all the ids cost a
// cache miss per call or two, the hashes being random: about 7 % of
// analyze's time. The ids are filed instead in blocks in the order they
// were taken, each block with its own small index and the span of the
// times of its ids: a call taken again is dated as the first time (its id
// hashes its time, audit.StableID), so only the blocks whose span holds
// the call's time are searched. Calls come nearly in time order: that is
// the block being filled, or none, and the older blocks are not touched.
type recentIDs struct {
	n, size int
	// blocks are in the order taken; the first from ids of the first
	// block are forgotten.
	blocks []*idBlock
	// spans are the blocks' spans of time, apart so that the search
	// reads a few cache lines and not one per block.
	spans []idSpan
	from  int
	count int
	free  *idBlock
}

// idSpan is the span of the times of a block's ids, in milliseconds.
type idSpan struct{ min, max int64 }

// idBlock is up to size ids in the order taken, and an open-addressing
// index of them: each slot holds an id's position plus one, 0 when empty.
type idBlock struct {
	hashes []uint64
	index  []uint16
	mask   uint64
}

// newRecentIDs remembers the last n ids, in blocks of size (at most
// 32,767: the index holds positions in 16 bits).
func newRecentIDs(n, size int) *recentIDs {
	return &recentIDs{n: n, size: min(size, 1<<15-1)}
}

// add remembers the tenant's id, taken by a call of time ms (Unix
// milliseconds, the time its id hashes); it returns false when it was
// already remembered. An empty id (a call built by hand) is never a
// duplicate.
func (r *recentIDs) add(tenant, id string, ms int64) bool {
	if id == "" {
		return true
	}
	// Ids are unique within a tenant: another tenant's call of the same
	// id is another call. The hash of the two written apart is the hash of
	// their concatenation, without making it.
	var mh maphash.Hash
	mh.SetSeed(ordSeed)
	mh.WriteString(tenant)
	mh.WriteByte(0)
	mh.WriteString(id)
	h := mh.Sum64()
	for i := len(r.spans) - 1; i >= 0; i-- {
		if s := r.spans[i]; ms < s.min || ms > s.max {
			continue
		}
		from := 0
		if i == 0 {
			from = r.from
		}
		if r.blocks[i].has(h, from) {
			return false
		}
	}
	r.push(h, ms)
	return true
}

// has reports whether h is in the block at a position from on.
func (b *idBlock) has(h uint64, from int) bool {
	for j := (h >> 32) & b.mask; b.index[j] != 0; j = (j + 1) & b.mask {
		if p := int(b.index[j]) - 1; b.hashes[p] == h && p >= from {
			return true
		}
	}
	return false
}

// push files h, of time ms, and forgets the oldest id past n.
func (r *recentIDs) push(h uint64, ms int64) {
	k := len(r.blocks) - 1
	if k < 0 || len(r.blocks[k].hashes) == r.size {
		r.blocks = append(r.blocks, r.newBlock())
		r.spans = append(r.spans, idSpan{ms, ms})
		k++
	}
	b, s := r.blocks[k], &r.spans[k]
	s.min, s.max = min(s.min, ms), max(s.max, ms)
	b.hashes = append(b.hashes, h)
	j := (h >> 32) & b.mask
	for b.index[j] != 0 {
		j = (j + 1) & b.mask
	}
	b.index[j] = uint16(len(b.hashes))
	if r.count++; r.count <= r.n {
		return
	}
	r.count--
	if r.from++; r.from == r.size {
		// The oldest block is wholly forgotten (it is not the one being
		// filled, which holds h): it is kept to be filled again.
		r.free = r.blocks[0]
		r.blocks = append(r.blocks[:0], r.blocks[1:]...)
		r.spans = append(r.spans[:0], r.spans[1:]...)
		r.from = 0
	}
}

// newBlock returns an empty block, the one last forgotten if any.
func (r *recentIDs) newBlock() *idBlock {
	if b := r.free; b != nil {
		r.free = nil
		b.hashes = b.hashes[:0]
		clear(b.index)
		return b
	}
	slots := 1
	for slots < 2*r.size {
		slots *= 2
	}
	return &idBlock{hashes: make([]uint64, 0, r.size), index: make([]uint16, slots), mask: uint64(slots - 1)}
}
