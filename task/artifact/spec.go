// Package artifact fetches a task's artifacts as Nomad's go-getter does
// for local files and http(s), in a sandbox: the fetch runs in a child
// process (berth-fetch, cmd/berth-fetch) as the task's user, with no
// capabilities, confined by Landlock where the kernel has it to reading
// its source and writing its destination, within size, file-count and
// time limits, and killed when the allocation stops or the agent dies.
// The runner resolves the source and the destination (both inside the
// allocation directory for local paths) and hands the child open
// directories, never paths: the child cannot reach anything else, even
// where Landlock is missing.
package artifact

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrArtifact is matched (errors.Is) by every artifact that could not be
// fetched, checked or unpacked.
var ErrArtifact = errors.New("artifact failed")

// ErrLimit is matched by a fetch that went past one of its Limits.
var ErrLimit = errors.New("artifact limit exceeded")

func errorf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrArtifact, fmt.Sprintf(format, a...))
}

// Limits bound one artifact's fetch, with the names and defaults of
// Nomad's client artifact block.
type Limits struct {
	// HTTPReadTimeout bounds the whole fetch (download and unpacking).
	HTTPReadTimeout time.Duration `json:"http_read_timeout"`
	// HTTPMaxSize bounds what is downloaded, in bytes.
	HTTPMaxSize int64 `json:"http_max_size"`
	// DecompressionSizeLimit bounds what is written (unpacked, decompressed
	// or copied), in bytes; DecompressionFileCountLimit the files,
	// directories and links made.
	DecompressionSizeLimit      int64 `json:"decompression_size_limit"`
	DecompressionFileCountLimit int   `json:"decompression_file_count_limit"`
}

// Nomad's defaults.
const (
	DefaultHTTPReadTimeout             = 30 * time.Minute
	DefaultHTTPMaxSize                 = 100e9
	DefaultDecompressionSizeLimit      = 100e9
	DefaultDecompressionFileCountLimit = 4096
)

// DefaultLimits are Nomad's defaults.
func DefaultLimits() Limits {
	return Limits{
		HTTPReadTimeout: DefaultHTTPReadTimeout, HTTPMaxSize: DefaultHTTPMaxSize,
		DecompressionSizeLimit: DefaultDecompressionSizeLimit, DecompressionFileCountLimit: DefaultDecompressionFileCountLimit,
	}
}

// orDefault fills zero fields with the defaults.
func (l Limits) orDefault() Limits {
	d := DefaultLimits()
	if l.HTTPReadTimeout <= 0 {
		l.HTTPReadTimeout = d.HTTPReadTimeout
	}
	if l.HTTPMaxSize <= 0 {
		l.HTTPMaxSize = d.HTTPMaxSize
	}
	if l.DecompressionSizeLimit <= 0 {
		l.DecompressionSizeLimit = d.DecompressionSizeLimit
	}
	if l.DecompressionFileCountLimit <= 0 {
		l.DecompressionFileCountLimit = d.DecompressionFileCountLimit
	}
	return l
}

// Spec is what the child is told: everything resolved, nothing to look
// up but the source itself.
type Spec struct {
	AllocID string `json:"alloc_id"`
	Task    string `json:"task"`
	// Source is the artifact's source as the job says it, for messages.
	Source string `json:"source"`
	// URL is an http(s) URL, query included; empty for a local source,
	// which is LocalName in the source directory handed over.
	URL       string            `json:"url,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	LocalName string            `json:"local_name,omitempty"`
	// Name is the file name the source ends with.
	Name string `json:"name"`
	// Mode is "any", "file" or "dir"; Kind the archive kind ("" none).
	Mode string `json:"mode"`
	Kind string `json:"kind,omitempty"`
	// Target is, for mode "file", the file's name in the destination
	// directory.
	Target       string `json:"target,omitempty"`
	ChecksumType string `json:"checksum_type,omitempty"`
	Checksum     string `json:"checksum,omitempty"`

	UID    int   `json:"uid"`
	GID    int   `json:"gid"`
	Groups []int `json:"groups,omitempty"`
	// Landlock: sandbox the child with Landlock (the kernel has it).
	Landlock bool   `json:"landlock"`
	Limits   Limits `json:"limits"`
}

func (s *Spec) marshal() []byte {
	b, _ := json.Marshal(s)
	return b
}
