package pack

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"layerfs.dev/layerfs/internal/store/object"
)

// The pack format.
const (
	Magic        = "LFSPACK\x01"
	HeaderSize   = 32 + 4 // a record's chunk ID and payload length
	MaxChunkSize = 1<<32 - 1
	// MinOffset is the lowest offset a payload can have: after the magic
	// and the first record's header.
	MinOffset = int64(len(Magic)) + HeaderSize
)

const (
	ext       = ".pack"
	nameWidth = 8
)

// Name is pack num's file name.
func Name(num int64) string { return fmt.Sprintf("%0*d%s", nameWidth, num, ext) }

// ParseName returns the number of the pack file called name, if it is one.
func ParseName(name string) (int64, bool) {
	s, ok := strings.CutSuffix(name, ext)
	if !ok || len(s) != nameWidth {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

// Header is the header of the record of chunk id with a payload of n bytes.
func Header(id object.ID, n int) [HeaderSize]byte {
	var hdr [HeaderSize]byte
	copy(hdr[:32], id[:])
	binary.LittleEndian.PutUint32(hdr[32:], uint32(n))
	return hdr
}

// ParseHeader returns the chunk ID and payload length a record's header
// (its first HeaderSize bytes) holds.
func ParseHeader(hdr []byte) (object.ID, int64) {
	var id object.ID
	copy(id[:], hdr[:32])
	return id, int64(binary.LittleEndian.Uint32(hdr[32:HeaderSize]))
}

// Appender appends chunk records to one pack for one batch at a time: a
// pack file (Writer) or a pack object being spooled (package bucketpack).
type Appender interface {
	Number() int64
	End() int64 // the pack's size so far
	// Append adds one record and returns its payload's offset.
	Append(id object.ID, data []byte) (off int64, err error)
	// Sync makes everything appended durable: fsynced, or uploaded.
	Sync() error
	// Rollback forgets everything appended since the pack was size bytes.
	Rollback(size int64) error
	// Retire marks the pack full: it is closed when released.
	Retire()
}
