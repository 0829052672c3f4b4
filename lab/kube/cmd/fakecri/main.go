// Command fakecri serves the Kubernetes project's own fake CRI runtime (k8s.io/cri-client/pkg/fake, the one the
// kubelet's tests use) on a unix socket, so that a real kubelet can start and register its Node on a machine without
// a container runtime. It runs no containers: the lab's kubelet exists to register a node, nothing else.
//
// Usage: fakecri unix:///path/to/cri.sock
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fakecri unix:///path/to/cri.sock")
		os.Exit(2)
	}
	runtime := fake.NewFakeRemoteRuntime()
	// The kubelet asks the runtime for its cgroup driver (KEP-4033); answer with the kubelet's default.
	runtime.RuntimeService.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{
		CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS,
	}
	if err := runtime.Start(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	runtime.Stop()
}
