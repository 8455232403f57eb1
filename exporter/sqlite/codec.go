package sqlite

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"

	"github.com/klauspost/compress/s2"
)

// Every call blob starts with a codec byte saying how the rest is stored.
// Codecs are never changed once released: a new dictionary or compressor
// gets a new byte, and old rows stay readable.
const (
	codecRaw   = 0 // the record as appendRecord wrote it
	_          = 1 // S2 against the dictionary of schema 1, whose files are not read
	codecS2Dv2 = 2 // S2 block compressed against dictV2
)

// dictV1 primed the compressor with what typical calls look like: the
// records (appendRecord) of the sample captures of exporter/storetest, whose
// JSON keys, tool names, codes and messages then cost a back-reference of two
// or three bytes instead of their text. The captures' random parts (ids,
// hashes) are useless to later calls but harmless. TestWriteDictionary
// rebuilt it; it is frozen by its hash (TestDictionaryFrozen) because the
// stored rows depend on it byte for byte.
//
// dictV2 is built the same way from the records of schema 2, which end
// with the dialect's reading.
//
//go:embed dict_v2.bin
var dictV2 []byte

// dictV2SHA256 is the hash of dict_v2.bin.
const dictV2SHA256 = "1651b582ab7ba866345015b43624d5190e94a63496158c40ed13db9de100d335"

var s2Dict = s2.MakeDict(dictV2, nil)

// maxRecord bounds the decoded size of one call blob, so that a corrupt
// length cannot make the reader allocate without limit. Default 64 MiB, four
// times capture.MaxLine.
const maxRecord = 64 << 20

// compress returns the stored blob of an encoded record.
func compress(rec []byte) []byte {
	blob, _ := appendCompressed(nil, nil, rec)
	return blob
}

// appendCompressed appends the stored blob of an encoded record to dst;
// tmp is scratch space for the compressor, returned for reuse. The blobs
// of many records appended to one dst take a few allocations of their
// total size, where compressing each into a buffer of its own took one of
// the worst case's size (several times a compressed record) per
// record.
func appendCompressed(dst, tmp, rec []byte) (out, tmpOut []byte) {
	n := s2.MaxEncodedLen(len(rec))
	if n < 0 {
		return append(append(dst, codecRaw), rec...), tmp
	}
	if cap(tmp) < n {
		tmp = make([]byte, n)
	}
	enc := s2Dict.Encode(tmp[:n], rec) // writes into tmp: it is large enough
	if len(enc) >= len(rec) {
		// Incompressible: store as is.
		return append(append(dst, codecRaw), rec...), tmp
	}
	return append(append(dst, codecS2Dv2), enc...), tmp
}

// decompress returns the record of a stored blob. buf may be reused.
func decompress(buf, blob []byte) ([]byte, error) {
	if len(blob) == 0 {
		return nil, errCorrupt
	}
	switch blob[0] {
	case codecRaw:
		return blob[1:], nil
	case codecS2Dv2:
		n, err := s2.DecodedLen(blob[1:])
		if err != nil || n > maxRecord {
			return nil, errCorrupt
		}
		out, err := s2Dict.Decode(buf[:0], blob[1:])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errCorrupt, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown codec %d", errCorrupt, blob[0])
}

func dictHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
