//go:build !race

package level1

const raceEnabled = false
