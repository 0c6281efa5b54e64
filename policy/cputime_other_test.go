//go:build !linux

package policy

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }
