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
//   - FactsScript and ParseFacts: the guest's kernel, CPUs and memory, read
//     by one shell line that every guest can run, for platforms.Identity.
//   - Daemon: the host's view of the guest layerfsd, over a forwarded unix
//     socket or a published TCP port with a bearer token. Wait polls
//     GET /v1/version with a bounded wait; LogTail turns a `tail` of the
//     guest daemon's log into the text a timeout error ends with.
//   - Semver, Tail and Truncate: the tool-version check and the trimming of
//     tool output for error messages.
//
// The package knows no tool by name; the platforms keep their argv, their
// sentinel errors and their messages.
package guest
