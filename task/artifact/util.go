package artifact

import (
	"encoding/json"
	"unsafe"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func uintptrOf(p *uint32) uintptr { return uintptr(unsafe.Pointer(p)) }
