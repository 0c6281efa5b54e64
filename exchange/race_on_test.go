//go:build race

package exchange

// raceEnabled: the race detector grows stacks and heap, so memory bounds do not apply.
const raceEnabled = true
