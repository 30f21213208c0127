//go:build race

package redisstore_test

// raceEnabled reports a build with the race detector.
const raceEnabled = true
