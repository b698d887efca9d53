package wire

import "time"

// PortProtocol is the Upgrade token of a port forward: POST
// /v1/workspaces/{id}/ports/{port}/connect with "Connection: Upgrade" and
// "Upgrade: layerfs-port/1" and no body. Once the daemon answers 101
// Switching Protocols, the connection carries the bytes of one TCP
// connection to the port inside the workspace's sandbox, both ways, until
// either side ends it (a half-close is passed on). A port nobody listens
// on is answered before the upgrade with an ordinary JSON error
// (unreachable, 502).
const PortProtocol = "layerfs-port/1"

// SharePrefix begins the path of every share URL: SharePrefix + token +
// "/" + the path the port's server is asked for.
const SharePrefix = "/share/"

// ShareRequest asks for a share of a workspace's port: a URL on the
// daemon's TCP listener that reaches the port with a token of its own
// instead of the daemon's authority.
type ShareRequest struct {
	Port int `json:"port"`
	// Public makes the share's token the workspace's id and the port
	// ("ws-1a2b-8000"): anyone who can reach the daemon's TCP listener and
	// guesses it reaches the port. Only when asked for.
	Public bool `json:"public,omitempty"`
}

// PortShare is a share of a workspace's port. Its token stays valid until
// it is revoked (DELETE .../shares/{port}) or the workspace ends, across
// daemon restarts.
type PortShare struct {
	Workspace string `json:"workspace"`
	Port      int    `json:"port"`
	// Token is the secret in the share's path.
	Token string `json:"token"`
	// Path is SharePrefix + Token + "/", on the daemon's TCP listener.
	Path string `json:"path"`
	// URL is Path on the daemon's TCP address (its --advertise address,
	// else --tcp); empty when the daemon has no TCP listener.
	URL     string    `json:"url,omitempty"`
	Public  bool      `json:"public,omitempty"`
	Created time.Time `json:"created"`
}
