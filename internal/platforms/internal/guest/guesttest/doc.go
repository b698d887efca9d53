// Package guesttest replays recorded conversations with a guest tool, for
// the tests of the VM platforms.
//
// A scenario (a JSON file in the platform's testdata/) lists the exact
// command lines the platform must make, in order, and what the tool
// answered to each: stdout, stderr, exit status, or that the tool is not
// installed. A Replayer is a guest.Runner that fails the test on any other
// command line, on a call past the end, and, at cleanup, on recorded calls
// that were never made; so a test fails when the argv or the order of the
// calls regresses, not only when the outcome does.
//
// Beside it are the pieces the three platforms' tests share: FakeBin (stand-in
// tools on PATH) and WantLog (what they were run with), FakeDaemon and
// ServeVersion (the guest daemon's binary and its answer on the forwarded
// socket or port), New and Up (a platform from a test Config, brought up),
// WantError (a sentinel and the words an error must have), CheckNames (the
// derived guest names) and Conformance (the real suite where the tool is
// installed).
package guesttest
