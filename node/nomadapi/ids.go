package nomadapi

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"hash/fnv"
)

// newUUID is a random UUID (version 4), as Nomad's IDs.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return formatUUID(b)
}

// uuidFrom is a UUID derived from s: the same s, the same ID (an
// evaluation ID named after what it is of).
func uuidFrom(s string) string {
	sum := sha256.Sum256([]byte(s))
	var b [16]byte
	copy(b[:], sum[:16])
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func fnv64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}
