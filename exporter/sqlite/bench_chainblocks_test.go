package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkChainBlocks measures what chaining the call log's blocks costs
// the committer, per block, on a real file (synchronous=full): a
// transaction per block (one entry each), against the blocks synced
// together chained in one transaction, with one entry per group of a
// tenant (what the store does) or one entry per block.
//
//	go test -run '^$' -bench ChainBlocks -benchtime 2000x ./exporter/sqlite/
func BenchmarkChainBlocks(b *testing.B) {
	for _, c := range []struct {
		name          string
		group         int  // blocks per transaction
		entryPerBlock bool // else one entry per group
	}{{"txn_per_block", 1, false}, {"txn_per_8/entry_per_group", 8, false}, {"txn_per_8/entry_per_block", 8, true},
		{"txn_per_64/entry_per_group", 64, false}, {"txn_per_64/entry_per_block", 64, true}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "audit.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			// The store's chaining of blocks, fed by hand (no call log):
			// the committer runs each transaction, as in serve.
			s.blocks = &blockChain{chained: map[string]LogBlock{}, stop: make(chan struct{}), done: make(chan struct{})}
			close(s.blocks.done) // no blockLoop
			if _, err := s.w.Exec(chainBlocksTable); err != nil {
				b.Fatal(err)
			}
			blk := 0
			b.ResetTimer()
			for i := 0; i < b.N; i += c.group {
				for j := 0; j < c.group; j++ {
					tenant := "t"
					if c.entryPerBlock {
						// A tenant per block: an entry each, in one
						// transaction, as chaining block by block would.
						tenant = fmt.Sprint("t", j)
					}
					blk++
					s.blocks.synced(LogBlock{Tenant: tenant, Block: blk, Calls: 512, First: int64(i), Last: int64(i + 1), SHA256: [32]byte{byte(i), byte(j)}})
				}
				if _, err := s.submit(context.Background(), &request{blocks: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
