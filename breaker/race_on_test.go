//go:build race

package breaker_test

// raceEnabled: the race detector allows at most 8,128 live goroutines.
const raceEnabled = true
