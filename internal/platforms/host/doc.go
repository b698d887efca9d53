// Package host makes the platforms that run sandboxes on this host's own
// kernel, local and docker, from their names. It is the one place both
// layerfsd and the catalog (which adds the VM platforms for the layerfs
// command) build them, so a daemon and a bench bring up the same platform
// for the same name. It links no VM platform: lima's packages need $HOME at
// initialisation, and a service manager may start the daemon without one.
package host
