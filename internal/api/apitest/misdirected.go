package apitest

import (
	"errors"

	"github.com/stretchr/testify/assert"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// checkMisdirected: every call on workspace id, which host serves, fails
// with a *wire.Error of code misdirected that names host, of the class
// errclass.Misdirected.
func checkMisdirected(f *fixture, id string, host wire.Node) {
	for _, c := range workspaceCalls(f, id) {
		err := c.call()
		var we *wire.Error
		if !errors.As(err, &we) {
			f.t.Errorf("%s: %v, want a *wire.Error", c.name, err)
			continue
		}
		assert.Equal(f.t, wire.CodeMisdirected, we.Code, "%s: the code", c.name)
		f.isClass(err, errclass.Misdirected, c.name)
		if assert.NotNil(f.t, we.Node, "%s: the host", c.name) {
			got := *we.Node
			got.Seen = host.Seen
			assert.Equal(f.t, host, got, "%s: the host", c.name)
		}
		assert.Contains(f.t, we.Message, host.Name, "%s: the message names the host", c.name)
	}
}
