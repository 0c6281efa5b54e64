//go:build race

package level1

// raceEnabled: the race detector grows stacks and heap, so memory bounds do not apply.
const raceEnabled = true
