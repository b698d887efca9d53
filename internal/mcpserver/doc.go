// Package mcpserver serves LayerFS to agents over the Model Context
// Protocol: `layerfs mcp` runs it on stdio, `layerfs mcp --http ADDR` on
// streamable HTTP behind a bearer token. It is built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk).
//
// # Design
//
// The server holds no state of its own: every tool is one or a few calls of
// the Go SDK (package client) on layerfsd, so every rule of the daemon
// (name, ref and path validation, size limits, compare-and-swap commits,
// refusing to end a workspace with uncommitted changes) holds for a model
// exactly as for any other client. The daemon is dialed on the first call
// through Config.Dial (the CLI passes its own dialer, which starts the
// Store's daemon when none runs) and dialed again after a failure that was
// not an answer of the API, so a daemon that exited idle or restarted is
// found again.
//
// # Errors
//
// A tool never fails the session. Bad arguments (wrong types, missing
// fields) are refused by the SDK against the tool's JSON schema; everything
// else the daemon refuses comes back as a tool result with isError set and a
// message a model can act on ("invalid_argument: path \"../x\" contains
// \"..\"...", "uncommitted_changes: ... call workspace_end with discard").
// Since the daemon checks before it changes anything, a refused call leaves
// the Store as it was.
//
// # Output sizes
//
// Results go into a model's context, so they are bounded: exec keeps the
// head and the tail of each stream (Config.MaxOutput, 64 KiB by default,
// with the middle cut and flagged), read_file returns at most max_bytes,
// list_dir and diff page. Binary file content travels as base64.
//
// # Watches
//
// The watch tool turns a workspace's event stream into polls: the server
// holds the stream between calls in a bounded buffer (the overflow is
// counted as dropped) and closes it on stop, when the workspace ends, or
// when no call polled it for 10 minutes (checked on every tool call).
//
// # Resumable streams
//
// Over HTTP (Server.Handler) the SDK's streamable transport runs with an
// event store of this package (eventStore): every SSE event has an id, each
// stream starts with a retry field and (from protocol version 2025-11-25) a
// priming event, and the events are kept in memory within StreamLimits (by
// age, per stream, and in all), so a client whose connection dropped in the
// middle of a long exec resumes the stream with Last-Event-ID. The front
// of the SDK's handler (resumable) checks a resumption against the store
// first, so one that cannot be served is refused with its reason; events
// are looked up by the request's own session, so a session's events are
// only given to that session.
//
// # Resources
//
// Files of a workspace are resources under the URI template
// layerfs://workspaces/{id}/files/{+path}: reading one returns the file
// (text, or a blob when not UTF-8) or, for a directory, its listing.
package mcpserver
