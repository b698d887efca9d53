package api

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
)

// TestPeerContext: a unix socket's connection carries its peer's ids; a
// TCP one carries none.
func TestPeerContext(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := net.Dial("unix", sock); err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	c, err := ln.Accept()
	require.NoError(t, err)
	defer c.Close()
	o, ok := peer(PeerContext(t.Context(), c))
	require.True(t, ok)
	require.Equal(t, wire.Owner{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}, o)

	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tl.Close()
	go func() {
		if c, err := net.Dial("tcp", tl.Addr().String()); err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	tc, err := tl.Accept()
	require.NoError(t, err)
	defer tc.Close()
	_, ok = peer(PeerContext(t.Context(), tc))
	require.False(t, ok)
}
