package task

import (
	"context"
	"testing"

	"github.com/berth/berth/internal/layers"
)

// The packages under task/ import only what layers.Groups allows them.
func TestLayer(t *testing.T) {
	pkgs, err := layers.List(context.Background(), ".", "./...")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range layers.Check(pkgs) {
		t.Error(v)
	}
}
