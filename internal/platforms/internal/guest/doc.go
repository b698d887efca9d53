// Package guest holds what the VM platforms (lima, applecontainer, libkrun)
// share about driving a Linux guest through a command-line tool and
// reaching the layerfsd that runs inside it.
//
// Each of those platforms is a thin layer over one CLI (limactl, Apple's
// container, msb): the command lines, their order and the error texts are
// the platform's own, but the plumbing under them is the same, and lives
// here once:
//
//   - Runner, Result and ExecRunner: every tool call goes through a Runner,
//     so a platform's tests can check the exact argv and replay the tool's
//     recorded outputs (guesttest.Replayer); ExecRunner is the os/exec one.
//     A non-zero exit is a Result, not an error: the platform judges it and
//     words the error, because only it knows what the tool's failure means.
//   - Tool: one platform's CLI over a Runner. Run logs the argv and turns
//     a missing tool into the platform's install hint (wrapping
//     platforms.ErrUnavailable); Must makes a non-zero exit an error with
//     platforms.ErrCommand and the tail of stderr; CheckVersion runs
//     `--version` once, with the platform's parser, minimum and upgrade
//     hint. The tools' differences are data, plus a Refuse hook for a
//     failure a tool has of its own (limactl refusing root).
//   - Name: the guest's name derived from the project's ("layerfs-demo");
//     each platform adds its tool's limit on names.
//   - FactsScript and ParseFacts: the guest's kernel, CPUs and memory, read
//     by one shell line that every guest can run, for platforms.Identity.
//   - Daemon: the host's view of the guest layerfsd, over a forwarded unix
//     socket or a published TCP port with a bearer token. Wait polls
//     GET /v1/version with a bounded wait; LogTail turns a `tail` of the
//     guest daemon's log into the text a timeout error ends with.
//   - Semver, Tail and Truncate: the tool-version check and the trimming of
//     tool output for error messages.
//
// The package knows no tool by name; the platforms keep their argv and
// their sentinel errors, and give Tool the words of their messages.
package guest
