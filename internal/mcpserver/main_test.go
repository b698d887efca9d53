package mcpserver_test

import (
	"testing"

	"layerfs.dev/layerfs/internal/daemontest"
)

func TestMain(m *testing.M) { daemontest.Main(m) }
