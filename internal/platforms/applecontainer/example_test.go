package applecontainer_test

import (
	"fmt"

	"layerfs.dev/layerfs/internal/platforms/applecontainer"
)

// Each project gets its own container, and so its own VM.
func ExampleContainerName() {
	for _, project := range []string{"demo", "My App"} {
		name, err := applecontainer.ContainerName(project)
		fmt.Println(name, err)
	}
	// Output:
	// layerfs-demo <nil>
	// layerfs-my-app-96c6f4 <nil>
}
