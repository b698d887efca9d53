// Package escapetest is the escape suite: hostile programs run in a
// platform's sandbox, each of which must fail and leave the host as it
// was. Platforms whose sandboxes run on this host's kernel (local, docker)
// run it from their tests:
//
//	func TestEscapes(t *testing.T) {
//		escapetest.Run(t, local.New(local.Options{}))
//	}
//
// Each case is one run of a small static program (./probe, built once per
// test binary) that tries one way out and reports "refused: ERRNO" or
// "allowed"; the case names the mechanism that stops it, and the suite
// logs the list with the result of each, which is what docs/security.md
// quotes. Control cases (creating an ordinary socket, writing the
// workspace) must be allowed, so that a broken probe cannot pass for a
// strong sandbox.
package escapetest
