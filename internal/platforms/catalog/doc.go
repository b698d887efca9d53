// Package catalog makes a platform from its name: the one place that knows
// every implementation, used by the layerfs command (cells run, bench
// session). The host platforms come from package host, which layerfsd uses
// alone: a daemon serves only those, and linking the VM platforms would
// bring lima's packages, whose initialisation needs $HOME, into a process a
// service manager may start without one.
package catalog
