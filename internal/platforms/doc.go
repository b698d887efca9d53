// Package platforms is the contract between LayerFS's engine and the places
// a sandbox can run: this Linux host (platforms/local), a Docker engine
// (platforms/docker) and Linux VMs (platforms/lima, platforms/applecontainer,
// platforms/libkrun). platforms/platformtest is the conformance suite that
// every implementation runs.
//
// The engine serves workspaces; a platform only makes them visible to
// sandboxes and runs commands in them. Platforms that cannot serve host
// directories run a whole layerfsd in their guest instead and expose its API
// (Remote), so every platform is driven through the same SDK.
//
// An exec's contract is stated once, here: ExecSpec.Normalize checks a spec
// and fills in its defaults, FromRequest makes one from an API request, and
// Workspace.Validate checks what a platform attaches. Every platform runs
// only normalized specs and refuses the rest with ErrBadSpec, and
// platformtest's BadSpecs and BadRequests are the cases each is held to.
// A new field of ExecSpec gets its rule in Normalize and its cases there.
package platforms
