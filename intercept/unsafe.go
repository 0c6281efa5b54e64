package intercept

import "unsafe"

// unsafePointer exists so the one unsafe conversion (reading a network-order port out of a raw
// sockaddr) is visible in one place.
func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
