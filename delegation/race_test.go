//go:build race

package delegation

// raceEnabled: the race detector slows bulk copying about tenfold, so the
// largest-payload runs happen in the plain run of .ci/run instead.
const raceEnabled = true
