//go:build race

package limit_test

// raceEnabled: the race detector slows the simulations tenfold.
const raceEnabled = true
