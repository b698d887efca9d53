package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
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

// UserNSFlag is a fragment of a guest's start script that sets $userns to
// what layerfsd serve needs on the guest's kernel: nothing from 6.12 on,
// whose FUSE mounts can be id-mapped, so that the guest's sandboxes get a
// user namespace of their own; before, --no-user-namespace, since a daemon
// that fails closed would refuse every exec on a workspace it cannot
// id-map. The guest daemon's isolation then says so, and the VM stays the
// boundary between the sandboxes and the host.
const UserNSFlag = `userns=; v=$(uname -r); maj=${v%%.*}; min=${v#*.}; min=${min%%.*}; ` +
	`if [ "$maj" -lt 6 ] || { [ "$maj" -eq 6 ] && [ "$min" -lt 12 ]; }; then userns=--no-user-namespace; fi`

// Isolation is what the guest daemon's own sandboxes get, as its GET
// /v1/daemon says of its first platform, under the VM platform's name and
// with the VM named as the boundary.
func (d Daemon) Isolation(ctx context.Context, platform, vm string) (wire.Isolation, error) {
	var st wire.DaemonStatus
	if err := d.get(ctx, "/daemon", &st); err != nil {
		return wire.Isolation{}, err
	}
	if len(st.Isolation) == 0 {
		return wire.Isolation{}, fmt.Errorf("the guest layerfsd (%s) says nothing of its sandboxes' isolation", st.Version.Version)
	}
	iso := st.Isolation[0]
	iso.Platform, iso.Boundary = platform, vm+", and in it "+iso.Boundary
	iso.Egress = "unavailable: " + platform + " does not drive its guest daemon's egress yet (network egress is refused)"
	if iso.UserNamespace == "" {
		iso.NoUserNamespace += "; the guest's start script turns it off on a kernel before 6.12, which cannot id-map a FUSE workspace (UserNSFlag)"
	}
	return iso, nil
}

// get decodes the answer to GET /v1<path> into v.
func (d Daemon) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.URL+"/"+wire.APIVersion+path, nil)
	if err != nil {
		return err
	}
	if d.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.Token)
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: GET /v1%s answered %s: %s", errNotAnswering, path, resp.Status, Tail(body, 3))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET /v1%s: decode %q: %w", path, Tail(body, 3), err)
	}
	return nil
}

// RemoteIsolation is what the sandboxes of the VM platform r get: its guest
// daemon's (Daemon.Isolation), found at r's endpoint.
func RemoteIsolation(ctx context.Context, r platforms.Remote, platform, vm string) (wire.Isolation, error) {
	addr, token, err := r.Endpoint(ctx)
	if err != nil {
		return wire.Isolation{}, err
	}
	d := TCPDaemon(addr, token)
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		d = UnixDaemon(path)
	}
	iso, err := d.Isolation(ctx, platform, vm)
	if err != nil {
		return wire.Isolation{}, fmt.Errorf("%s: isolation: %w", platform, err)
	}
	return iso, nil
}

// errNotAnswering marks a daemon that answered, but not with its version.
var errNotAnswering = errors.New("no answer")

// Version asks the daemon for GET /v1/version once.
func (d Daemon) Version(ctx context.Context) (wire.Version, error) {
	var v wire.Version
	err := d.get(ctx, "/version", &v)
	return v, err
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
