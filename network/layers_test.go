package network

import (
	"testing"

	"github.com/berth/berth/internal/layers"
)

// The packages under network/ import only what layers.Groups allows them.
func TestLayer(t *testing.T) { layers.TestDir(t) }
