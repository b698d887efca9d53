package api

import (
	"context"
	"net"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/wire"
)

type peerKey struct{}

// PeerContext is an http.Server's ConnContext: on a unix socket it keeps
// the peer's credentials (SO_PEERCRED) in the connection's context, for
// what defaults to the caller (a new workspace's owner).
func PeerContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, wire.Owner{UID: cred.Uid, GID: cred.Gid})
}

// peer is the caller's host user, when it came through a unix socket.
func peer(ctx context.Context) (wire.Owner, bool) {
	o, ok := ctx.Value(peerKey{}).(wire.Owner)
	return o, ok
}
