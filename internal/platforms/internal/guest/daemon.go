package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"layerfs.dev/layerfs/wire"
)

// Daemon is how the host reaches a guest layerfsd: the HTTP client that
// connects to it, the base URL it serves the API under, and the bearer
// token it wants ("" for none).
type Daemon struct {
	Client *http.Client
	URL    string
	Token  string
}

// UnixDaemon reaches a daemon through the unix socket at path on this host
// (the host end of a forwarded or published guest socket). The socket
// stands for the host, so the URL's host is only a placeholder.
func UnixDaemon(path string) Daemon {
	d := net.Dialer{Timeout: 2 * time.Second}
	return Daemon{
		Client: &http.Client{
			Timeout: 5 * time.Second,
			Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return d.DialContext(ctx, "unix", path)
				},
				DisableKeepAlives: true,
			},
		},
		URL: "http://layerfsd",
	}
}

// TCPDaemon reaches a daemon at url ("http://127.0.0.1:PORT", a published
// guest port) that wants token.
func TCPDaemon(url, token string) Daemon {
	return Daemon{Client: &http.Client{Timeout: 5 * time.Second}, URL: url, Token: token}
}

// errNotAnswering marks a daemon that answered, but not with its version.
var errNotAnswering = errors.New("no answer")

// Version asks the daemon for GET /v1/version once.
func (d Daemon) Version(ctx context.Context) (wire.Version, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/"+wire.APIVersion+"/version", nil)
	if err != nil {
		return wire.Version{}, err
	}
	if d.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.Token)
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return wire.Version{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return wire.Version{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return wire.Version{}, fmt.Errorf("%w: GET /v1/version answered %s: %s", errNotAnswering, resp.Status, Tail(body, 3))
	}
	var v wire.Version
	if err := json.Unmarshal(body, &v); err != nil {
		return wire.Version{}, fmt.Errorf("GET /v1/version: decode %q: %w", Tail(body, 3), err)
	}
	return v, nil
}

// Wait polls GET /v1/version until the daemon answers or timeout passes;
// on timeout it returns the last probe's error, which the platform puts in
// its own error together with the guest daemon's log (LogTail).
func (d Daemon) Wait(ctx context.Context, timeout time.Duration) (wire.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := d.Version(ctx)
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return wire.Version{}, err
		case <-tick.C:
		}
	}
}

// LogTail turns the outcome of `tail -n 40 LOG` run in the guest into text
// for an error message: the log's last 40 lines, or why it could not be
// read. It takes a tool call's results as they come, so a platform writes
// guest.LogTail(p.tool(ctx, ...argv that tails the log...)).
func LogTail(res Result, err error) string {
	if err != nil {
		return "(cannot read it: " + err.Error() + ")"
	}
	if res.ExitCode != 0 {
		return "(cannot read it: " + Tail(res.Stderr, 3) + ")"
	}
	return Tail(res.Stdout, 40)
}
