package lima_test

import (
	"fmt"

	"layerfs.dev/layerfs/internal/platforms/lima"
)

// The instance definition is generated from the configuration; Up hands it
// to `limactl create` after Lima's own validation.
func ExampleTemplate() {
	cfg := lima.Options{Project: "demo", Image: "/images/debian-12-arm64.qcow2", Arch: "aarch64", CPUs: 2, Memory: "4GiB"}
	y, err := lima.Template(cfg, "/Users/dev/.lima/layerfs-demo/sock/layerfsd.sock")
	if err != nil {
		panic(err)
	}
	b, err := lima.MarshalTemplate(y)
	if err != nil {
		panic(err)
	}
	name, _ := lima.InstanceName(cfg.Project)
	fmt.Printf("# %s\n%s", name, b)
	// Output:
	// # layerfs-demo
	// arch: aarch64
	// images:
	// - location: /images/debian-12-arm64.qcow2
	//   arch: aarch64
	// cpus: 2
	// memory: 4GiB
	// provision:
	// - mode: system
	//   script: "#!/bin/sh\nset -eu\nmodprobe fuse || true\nmkdir -p /run/layerfs /var/lib/layerfs\n"
	// containerd:
	//   system: false
	//   user: false
	// portForwards:
	// - guestPortRange:
	//   - 0
	//   - 0
	//   guestSocket: /run/layerfs/layerfsd.sock
	//   hostPortRange:
	//   - 0
	//   - 0
	//   hostSocket: /Users/dev/.lima/layerfs-demo/sock/layerfsd.sock
	// - guestIP: 0.0.0.0
	//   guestPortRange:
	//   - 1
	//   - 65535
	//   hostPortRange:
	//   - 0
	//   - 0
	//   proto: any
	//   ignore: true
}
