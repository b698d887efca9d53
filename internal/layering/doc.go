// Package layering holds no code: its tests assert the import rules and
// the error idiom that docs/architecture.md states, so a change that
// crosses a layer or drops an error's cause fails CI instead of eroding
// the design one import or one error at a time.
package layering
