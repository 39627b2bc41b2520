package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// CacheEntry is one file of libcni's results cache
// (<cache dir>/results/<network>-<container ID>-<ifname>).
type CacheEntry struct {
	File        string
	ContainerID string
	Network     string
	IfName      string
	NetNS       string
	// Args are the CNI_ARGS the attachment was made with; the ownership
	// markers are among them (see Owned).
	Args map[string]string
}

// cacheFile is the part of libcni's cachedInfo (libcni/api.go) berth reads.
type cacheFile struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	NetNS       string      `json:"netns"`
	CniArgs     [][2]string `json:"cniArgs"`
}

// cacheKind is the only cache format libcni writes and reads back.
const cacheKind = "cniCacheV1"

// ReadCache reads the entries of <cacheDir>/results, those of one
// container when containerID is set, sorted by network and container ID.
// Files that are not libcni cache entries are skipped, as libcni itself
// skips them, and so is an entry removed while it is read. A missing
// cache has no entries.
func ReadCache(ctx context.Context, cacheDir, containerID string) ([]CacheEntry, error) {
	dir := filepath.Join(cacheDir, "results")
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read CNI cache %s: %w", dir, err)
	}
	var out []CacheEntry
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("read CNI cache %s: %w", dir, err)
		}
		// libcni names the file <network>-<container ID>-<ifname>: the
		// name rules out most files without reading them.
		if de.IsDir() || (containerID != "" && !strings.Contains(de.Name(), "-"+containerID+"-")) {
			continue
		}
		p := filepath.Join(dir, de.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		e, ok := ParseCacheEntry(b)
		if !ok || (containerID != "" && e.ContainerID != containerID) {
			continue
		}
		e.File = p
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Network != out[j].Network {
			return out[i].Network < out[j].Network
		}
		if out[i].ContainerID != out[j].ContainerID {
			return out[i].ContainerID < out[j].ContainerID
		}
		return out[i].IfName < out[j].IfName
	})
	return out, nil
}

// ParseCacheEntry parses one cache file. It accepts what libcni's
// GetCachedAttachments accepts: kind cniCacheV1 with a container ID, a
// network name and an interface name.
func ParseCacheEntry(b []byte) (CacheEntry, bool) {
	var f cacheFile
	if json.Unmarshal(b, &f) != nil || f.Kind != cacheKind || f.ContainerID == "" || f.NetworkName == "" || f.IfName == "" {
		return CacheEntry{}, false
	}
	e := CacheEntry{ContainerID: f.ContainerID, Network: f.NetworkName, IfName: f.IfName, NetNS: f.NetNS, Args: make(map[string]string, len(f.CniArgs))}
	for _, kv := range f.CniArgs {
		e.Args[kv[0]] = kv[1]
	}
	return e, true
}
