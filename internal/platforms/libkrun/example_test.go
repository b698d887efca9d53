package libkrun_test

import (
	"fmt"

	"layerfs.dev/layerfs/internal/platforms/libkrun"
)

// Each project gets its own microVM.
func ExampleSandboxName() {
	for _, project := range []string{"demo", "../etc"} {
		name, err := libkrun.SandboxName(project)
		fmt.Println(name, err)
	}
	// Output:
	// layerfs-demo <nil>
	// layerfs-etc-f7f912 <nil>
}
