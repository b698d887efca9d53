package kerneloverlay

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"layerfs.dev/layerfs/internal/testenv"
)

// TestLoads: a file system type the kernel can make is found whether or
// not /proc/filesystems lists it yet; one it cannot make is not.
func TestLoads(t *testing.T) {
	testenv.RequireRoot(t)
	assert.True(t, loads("overlay"), "overlay")
	assert.True(t, loads("tmpfs"), "tmpfs")
	assert.False(t, loads("layerfs-no-such-fs"), "a type no kernel has")
}
