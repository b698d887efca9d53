// Package userns is what the platforms that run sandboxes on this kernel
// (local and docker) share about user namespaces: the range of host ids a
// sandbox's ids 0 to Size-1 map to (Range; Default, or the subordinate ids
// of the user "layerfs"), and a namespace with that mapping made once and
// held as an open /proc/PID/ns/user (Hold), with which workspaces are
// id-mapped.
package userns
