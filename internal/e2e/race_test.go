//go:build race

package e2e

// raceEnabled: the tests run with -race, so TestMain builds the daemon with
// -race too and a data race in it fails the test that saw it.
const raceEnabled = true
