package apitest

import (
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// portChecks are those of Ports.
var portChecks = []check{
	{"PortErrors", checkPortErrors},
	{"PortShares", checkPortShares},
}

// checkPortErrors: a port nobody listens on is unreachable and named, a
// bad one invalid, one of a workspace that ended not found.
func checkPortErrors(f *fixture) {
	p := f.project()
	ws := f.workspace(p, "main")
	_, err := f.eng.DialPort(f.ctx, ws.ID, 8000)
	f.isClass(err, errclass.Unreachable, "a port nobody listens on")
	if err != nil {
		assert.Contains(f.t, err.Error(), "port 8000")
	}
	for _, port := range []int{0, 65536} {
		_, err := f.eng.DialPort(f.ctx, ws.ID, port)
		f.isClass(err, errclass.Invalid, "a bad port")
	}
	require.NoError(f.t, f.eng.EndWorkspace(f.ctx, ws.ID, true))
	_, err = f.eng.DialPort(f.ctx, ws.ID, 8000)
	f.isClass(err, errclass.NotFound, "a port of a workspace that ended")
}

// checkPortShares: a port has one share, found by its token until it is
// revoked or its workspace ends.
func checkPortShares(f *fixture) {
	p := f.project()
	ws := f.workspace(p, "main")
	sh, err := f.eng.SharePort(f.ctx, ws.ID, wire.ShareRequest{Port: 8000})
	require.NoError(f.t, err)
	again, err := f.eng.SharePort(f.ctx, ws.ID, wire.ShareRequest{Port: 8000})
	require.NoError(f.t, err)
	assert.Equal(f.t, sh.Token, again.Token, "one share per port")
	_, err = f.eng.SharePort(f.ctx, ws.ID, wire.ShareRequest{Port: 8000, Public: true})
	f.isClass(err, errclass.Exists, "a share asked again as public")
	id, port, err := f.eng.SharedPort(f.ctx, sh.Token)
	require.NoError(f.t, err)
	assert.Equal(f.t, []any{ws.ID, 8000}, []any{id, port})
	require.NoError(f.t, f.eng.UnsharePort(f.ctx, ws.ID, 8000))
	_, _, err = f.eng.SharedPort(f.ctx, sh.Token)
	f.isClass(err, errclass.NotFound, "a revoked token")
	f.isClass(f.eng.UnsharePort(f.ctx, ws.ID, 8000), errclass.NotFound, "a port not shared")

	pub, err := f.eng.SharePort(f.ctx, ws.ID, wire.ShareRequest{Port: 9000, Public: true})
	require.NoError(f.t, err)
	assert.Equal(f.t, ws.ID+"-9000", pub.Token)
	list, err := f.eng.PortShares(f.ctx, ws.ID)
	require.NoError(f.t, err)
	assert.Len(f.t, list, 1)
	require.NoError(f.t, f.eng.EndWorkspace(f.ctx, ws.ID, true))
	_, _, err = f.eng.SharedPort(f.ctx, pub.Token)
	f.isClass(err, errclass.NotFound, "the token of a workspace that ended")
}
