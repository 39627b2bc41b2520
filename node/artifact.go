package node

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/task/artifact"
)

// Artifact bounds the fetch of each task artifact, with the names and
// defaults of Nomad's client artifact block.
type Artifact struct {
	HTTPReadTimeout             string `hcl:"http_read_timeout,optional" help:"longest an artifact's fetch (download and unpacking) may take"`
	HTTPMaxSize                 string `hcl:"http_max_size,optional" help:"largest artifact download, e.g. \"100GB\", \"512MiB\""`
	DecompressionSizeLimit      string `hcl:"decompression_size_limit,optional" help:"most an artifact may write (unpacked, decompressed or copied), e.g. \"100GB\""`
	DecompressionFileCountLimit int    `hcl:"decompression_file_count_limit,optional" help:"most files, directories and links an artifact may make"`
}

// DefaultArtifact is Nomad's defaults.
func DefaultArtifact() *Artifact {
	return &Artifact{
		// artifact.DefaultHTTPReadTimeout, written as Nomad writes it.
		HTTPReadTimeout: "30m", HTTPMaxSize: "100GB",
		DecompressionSizeLimit: "100GB", DecompressionFileCountLimit: artifact.DefaultDecompressionFileCountLimit,
	}
}

func (c *Config) artifactSettings() *Artifact {
	if c.Artifact == nil {
		c.Artifact = DefaultArtifact()
	}
	return c.Artifact
}

func (c *Config) checkArtifact(p *Problems) {
	a := c.artifactSettings()
	if d, err := time.ParseDuration(a.HTTPReadTimeout); err != nil || d <= 0 {
		p.Add("artifact.http_read_timeout", "%q: use a positive duration such as \"30m\"", a.HTTPReadTimeout)
	}
	for _, s := range []struct{ path, v string }{
		{"artifact.http_max_size", a.HTTPMaxSize}, {"artifact.decompression_size_limit", a.DecompressionSizeLimit},
	} {
		if n, err := ParseSize(s.v); err != nil || n <= 0 {
			p.Add(s.path, "%q: use a positive size such as \"100GB\" or \"512MiB\"", s.v)
		}
	}
	if a.DecompressionFileCountLimit < 1 {
		p.Add("artifact.decompression_file_count_limit", "%d: allow at least 1 file", a.DecompressionFileCountLimit)
	}
}

// ArtifactLimits are the artifact settings as the runner takes them
// (after Validate; an unparsable one is the default).
func (c *Config) ArtifactLimits() artifact.Limits {
	a := c.artifactSettings()
	l := artifact.DefaultLimits()
	if d, err := time.ParseDuration(a.HTTPReadTimeout); err == nil && d > 0 {
		l.HTTPReadTimeout = d
	}
	if n, err := ParseSize(a.HTTPMaxSize); err == nil && n > 0 {
		l.HTTPMaxSize = n
	}
	if n, err := ParseSize(a.DecompressionSizeLimit); err == nil && n > 0 {
		l.DecompressionSizeLimit = n
	}
	if a.DecompressionFileCountLimit > 0 {
		l.DecompressionFileCountLimit = a.DecompressionFileCountLimit
	}
	return l
}

// sizeUnits are the suffixes ParseSize takes, longest first.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
}

// ParseSize reads a size as Nomad's settings write them: a whole number
// of bytes, or one with a unit (KB, MB, GB, TB by 1000; KiB, MiB, GiB, TiB
// by 1024).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: a whole number with an optional unit (KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	return n * mult, nil
}
