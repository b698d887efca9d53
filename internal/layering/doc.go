// Package layering holds no code: its test asserts the import rules that
// docs/architecture.md states, so a change that crosses a layer fails CI
// instead of eroding the design one import at a time.
package layering
